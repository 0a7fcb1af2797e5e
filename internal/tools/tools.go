//go:build tools

package tools

import (
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/redis/go-redis/v9"
	_ "go.etcd.io/bbolt"
)
