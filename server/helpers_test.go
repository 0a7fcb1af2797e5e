package server

import (
	"bytes"
	"log/slog"
	"sync"
)

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// syncBuffer is a log sink that a test reads while a server writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
