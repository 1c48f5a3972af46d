package patch

import "github.com/conductor-dev/conductor/patch/git"

// Git is git.Git, the guarded git helper, under the name patch's functions
// take it by: a caller that only hands a repository to patch (extract,
// apply, diffs) needs one import. Everything else of git's (errors, refs,
// versions, ids) is patch/git's own, used from there.
type Git = git.Git
