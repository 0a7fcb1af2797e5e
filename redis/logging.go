package redis

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// RouteClientLogs sends the lines go-redis logs by itself (connection-pool
// failures such as "failed to dial after 5 attempts", which it otherwise writes to
// standard error with the log package, past any --log-format) to l, at level
// Warn, with the attribute component=go-redis. go-redis has one logger per
// process, so this applies to every client of the process, the last call winning;
// the program calls it once, with its own logger. A nil l is ignored.
func RouteClientLogs(l *slog.Logger) {
	if l == nil {
		return
	}
	goredis.SetLogger(clientLog{l})
}

// clientLog is go-redis's Logging interface over a slog.Logger.
type clientLog struct{ l *slog.Logger }

func (c clientLog) Printf(ctx context.Context, format string, v ...any) {
	msg := strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: ")
	c.l.LogAttrs(context.WithoutCancel(ctx), slog.LevelWarn, msg, slog.String("component", "go-redis"))
}
