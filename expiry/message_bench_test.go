package expiry_test

import (
	"testing"

	"github.com/seatflow/orderexpiry/expiry"
)

var benchMsg = expiry.Message{OrderNo: "SF20261130-000123456", Hop: 3}

func BenchmarkEncodeMessage(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := expiry.EncodeMessage(benchMsg); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeMessage(b *testing.B) {
	body, err := expiry.EncodeMessage(benchMsg)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := expiry.DecodeMessage(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeMessageBad(b *testing.B) {
	body := []byte("oe1 a{b} 1")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := expiry.DecodeMessage(body); err == nil {
			b.Fatal("accepted")
		}
	}
}
