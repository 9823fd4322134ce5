module github.com/queue-dev/queue

go 1.26.0

require (
	github.com/valyala/bytebufferpool v1.0.0
	golang.org/x/net v0.62.0
)

require golang.org/x/text v0.43.0 // indirect
