package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
)

// redisLogger routes go-redis's own messages (it prints them to stderr by
// default, unstructured, one per failed dial) through slog at debug level,
// tagged component=redis: the worker already logs one line per outage
// (CONDUCTOR_DEBUG=1 shows these too).
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, strings.TrimSpace(fmt.Sprintf(format, v...)), "component", "redis")
}

// setupProcess configures what is process-wide by nature, once, before run:
// go-redis's logger is a package variable of that library.
func setupProcess() {
	level := slog.LevelInfo
	if os.Getenv("CONDUCTOR_DEBUG") != "" {
		level = slog.LevelDebug
	}
	redis.SetLogger(redisLogger{log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))})
}
