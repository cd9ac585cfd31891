//go:build race

package explore

// defaultDepth is -explore.depth's default under the race detector, which
// makes a replay about five times slower: one step less keeps the default
// run near a minute and a half of CPU on a 2-core machine (it took 260-320
// s before the reductions of issue 38).
const defaultDepth = 6

// defaultReplayDepth is -replay.depth's default under the race detector:
// one step less (about 1000 sequences on SQLite).
const defaultReplayDepth = 3
