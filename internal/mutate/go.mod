module github.com/seatflow/orderexpiry/internal/mutate

go 1.26.0
