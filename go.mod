module github.com/queue-dev/queue

go 1.26.0

require (
	github.com/valyala/bytebufferpool v1.0.0
	golang.org/x/net v0.62.0
)

require (
	github.com/coder/websocket v1.8.15 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	google.golang.org/grpc v1.85.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
