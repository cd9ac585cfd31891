// Package docs holds the tests that keep the repository's markdown honest:
// the README stays a front door (at most 200 lines), every relative link in
// every markdown file opens a file of this repository (and, for a link to a
// heading, that heading), no document cites what a reader cannot open (an
// issue number, a pass by a design's number), and every call the README
// quotes in its transport section is compiled code of this repository.
// It has no code of its own.
package docs
