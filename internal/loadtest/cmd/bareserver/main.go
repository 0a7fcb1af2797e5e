// Command bareserver is the baseline of the gateway's load measurements (issue
// #18): a bare net/http handler, in a process of its own like the gateway, that
// answers every POST /v1/ids with a constant body of the size of a count=1 answer.
// `idkeeper bench --count 1` drives it and a gateway the same way:
//
//	go run ./internal/loadtest/cmd/bareserver -listen 127.0.0.1:18090 &
//	go run ./cmd/idkeeper bench --gateway http://127.0.0.1:18090 --clients 16 --count 1 --duration 5s
package main

import (
	"flag"
	"log"
	"net/http"
)

// body is what the gateway answers a count=1 request with, give or take the ID.
var body = []byte(`{"ids":[123456789012345678]}` + "\n")

func main() {
	listen := flag.String("listen", "127.0.0.1:18090", "host:port to serve on (loopback by default)")
	flag.Parse()
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header()["Content-Type"] = []string{"application/json"}
		_, _ = w.Write(body)
	})
	log.Fatal(http.ListenAndServe(*listen, h))
}
