package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every package's documentation names what the package exports (its
// "Names" section): the library keeps more names than it aimed at, and a
// name that is not there has no stated reason to be exported.
func TestEveryNameIsListed(t *testing.T) {
	pkgs, err := Scan("../..")
	require.NoError(t, err)
	require.Contains(t, pkgs, "cancel", "the scan must find the library's packages")
	for dir, c := range pkgs {
		assert.Empty(t, c.unlisted(), "%s: names its documentation does not list", dir)
	}
}

// The listing check matches whole words only: a name that is a prefix of a
// listed one is still unlisted.
func TestUnlistedWholeWords(t *testing.T) {
	c := counts{topLevel: []string{"Kind", "KindSent", "Status"}, doc: "KindSent: a message was sent. Status is the order's."}
	assert.Equal(t, []string{"Kind"}, c.unlisted())
}
