// Package ent is the ent client of the enthost example, generated from
// ./schema with ent's sql/execquery feature, which gives the client and its
// transaction ExecContext and QueryContext (cancel.Querier). Regenerate,
// from examples/orm/enthost/ent, with:
//
//	go run entgo.io/ent/cmd/ent generate --feature sql/execquery ./schema
package ent

//go:generate go run entgo.io/ent/cmd/ent generate --feature sql/execquery ./schema
