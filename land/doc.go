// Package land turns a resolved merge decision into exactly one local commit
// on the target: it proves the work ref is still at the approved commit,
// checks the landing policy, squashes onto the target tip, checks the
// squash's patch-id against the reviewed one, runs the gate on exactly the
// tree being committed and moves the target by compare-and-swap.
//
// land never pushes, never changes anything when it refuses, and never runs
// git through anything but patch.Git.
package land
