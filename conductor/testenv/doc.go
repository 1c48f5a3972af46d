// Package testenv starts the real servers tests need, one per test binary or
// per test, on private unix sockets in temp folders: PostgreSQL (Postgres)
// and Redis (Redis). A test whose server binary is absent is skipped
// locally and fails when CI=true.
//
// testenv is imported by tests only; it never touches a server it did not
// start.
package testenv
