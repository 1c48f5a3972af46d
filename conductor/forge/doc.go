// Package forge is the conductor's side of the code forge: pushing a branch,
// opening a draft pull request, finding an existing one, and commenting on
// and closing an issue. Forge is the small interface; Gitea implements it on
// code.gitea.io/sdk/gitea and the git CLI.
//
// forge holds the forge token. It must never hand it to a worker, write it to
// a git config file, put it in a process's argv, log it or store it in a run
// record: the token reaches git only through the environment of the one push
// process (GIT_CONFIG_COUNT entries scoped to the forge's URL), and every HTTP
// request goes through a transport that redacts it from logs and errors.
// runtask never imports this package.
package forge
