//go:build !linux

package snowflake

import "time"

// sleep waits for about d.
func sleep(d time.Duration) { time.Sleep(d) }
