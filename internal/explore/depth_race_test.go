//go:build race

package explore

// defaultDepth is -explore.depth's default under the race detector, which
// makes a replay about five times slower: one step less keeps the default
// run near two minutes on a 2-core machine.
const defaultDepth = 6

// defaultReplayDepth is -replay.depth's default under the race detector:
// one step less (about 1000 sequences on SQLite).
const defaultReplayDepth = 3
