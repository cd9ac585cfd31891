// Package schema is the ent schema of the enthost example: the host's own
// row placed with each order.
package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
)

// Note is the host's row of an order (table order_note): its order number
// as the key, so a second note for one order fails, and a free-text note.
type Note struct {
	ent.Schema
}

// Annotations names the table, which the host creates itself.
func (Note) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "order_note"}}
}

// Fields of Note.
func (Note) Fields() []ent.Field {
	return []ent.Field{
		field.String("id").StorageKey("order_no").MaxLen(64).NotEmpty().Immutable(),
		field.String("note").MaxLen(200),
	}
}
