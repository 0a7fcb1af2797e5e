package main

import "github.com/idkeeper/idkeeper/server"

// DefaultStore is the --store default: the embedded store in ./data. Every
// command opens its --store with server.OpenStore, which knows the stores.
const DefaultStore = server.DefaultStore
