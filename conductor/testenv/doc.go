// Package testenv starts the real servers tests need, one per test binary or
// per test, on private unix sockets or ports in temp folders: PostgreSQL
// (Postgres), Redis (Redis) and Gitea (GiteaServer, built once by
// scripts/gitea-build.sh into a cache folder keyed by version). A test whose
// server binary is absent is skipped locally and fails when CI=true.
//
// testenv is imported by tests only; it never touches a server it did not
// start.
package testenv
