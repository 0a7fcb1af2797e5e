package main

import (
	"flag"
	"strconv"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/alert"
	"github.com/idkeeper/idkeeper/server"
)

// The server's Discord alerts (issue #11, docs/alerts.md): always on, sent to the
// webhooks the admin web's users set on their profile; with none set, nothing
// is sent.

// alertFlags are the server's alert flags.
type alertFlags struct {
	capacity float64 // percent of the pool
	repeat   time.Duration
	title    string
}

func (f *alertFlags) register(fs *flag.FlagSet) {
	fs.Float64Var(&f.capacity, "alert-capacity-threshold", alert.DefaultCapacityThreshold*100,
		"alert the users' Discord webhooks when free node IDs fall below this percentage of the pool; 0.1..100")
	fs.DurationVar(&f.repeat, "alert-repeat", alert.DefaultRepeat, "send a standing capacity alert again this often; 1m..24h")
	fs.StringVar(&f.title, "alert-title", "IdKeeper", "the start of every alert's title, to tell deployments apart in one channel; 1..64 characters")
}

// config checks the flags and returns the alerts' settings.
func (f *alertFlags) config() (server.AlertConfig, error) {
	switch {
	case !(f.capacity >= 0.1 && f.capacity <= 100):
		return server.AlertConfig{}, usageError{&idkeeper.RangeError{Setting: "alert-capacity-threshold",
			Value: strconv.FormatFloat(f.capacity, 'g', -1, 64), Min: "0.1", Max: "100"}}
	case f.repeat < time.Minute || f.repeat > 24*time.Hour:
		return server.AlertConfig{}, usageError{&idkeeper.RangeError{Setting: "alert-repeat", Value: f.repeat.String(), Min: "1m0s", Max: "24h0m0s"}}
	case f.title == "" || len([]rune(f.title)) > 64:
		return server.AlertConfig{}, usagef("--alert-title %q: want 1 to 64 characters", f.title)
	}
	return server.AlertConfig{Threshold: f.capacity / 100, Repeat: f.repeat, Title: f.title}, nil
}
