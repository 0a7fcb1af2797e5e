package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper"
)

const apikeyUsage = `Usage: idkeeper apikey create --description TEXT [--expires 720h] [--store …]

Creates an API key for the /v1 API and prints it once on standard output. Only
its hash is stored: a lost key cannot be shown again, only replaced.
`

// runAPIKey is the apikey command; its one subcommand is create.
func runAPIKey(ctx context.Context, args []string, env lookupEnv, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "create" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(stdout, apikeyUsage)
			return nil
		}
		fmt.Fprint(stderr, apikeyUsage)
		return usagef("apikey: want the subcommand create")
	}
	fs := newFlagSet("apikey create", stderr)
	store := fs.String("store", DefaultStore, "the store: bolt:PATH, redis://… or rediss://… (a bolt file must not be open in a running server)")
	redisPrefix := fs.String("redis-prefix", "", "prefix of every Redis key, as given to the server")
	desc := fs.String("description", "", "what the key is for, shown to operators (required)")
	expires := fs.Duration("expires", 720*time.Hour, "lifetime of the key; 0: never expires")
	var lf logFlags
	lf.register(fs)
	if err := parseFlags(fs, args[1:], env); err != nil {
		return err
	}
	if strings.TrimSpace(*desc) == "" {
		return usagef("apikey create: --description is required")
	}
	if *expires < 0 {
		return usagef("apikey create: --expires %s is negative; want 0 (never expires) or a positive duration", expires)
	}
	log := lf.logger(stderr)
	s, err := openStore(ctx, *store, storeOptions{Logger: log, RedisPrefix: *redisPrefix})
	if err != nil {
		return err
	}
	defer s.Close()

	// API keys are checked against the server's wall clock (Registry.Authenticate), so
	// their expiry is measured on it too.
	now := time.Now()
	var until time.Time
	if *expires > 0 {
		until = idkeeper.Millis(now.Add(*expires))
	}
	secret, key := idkeeper.NewAPIKey(strings.TrimSpace(*desc), now, until)
	if err := s.CreateAPIKey(ctx, key); err != nil {
		return fmt.Errorf("store the API key: %w", err)
	}
	fmt.Fprintln(stdout, secret)
	expiry := "never expires"
	if !until.IsZero() {
		expiry = "expires " + until.Format(time.RFC3339)
	}
	log.Info("API key created; it is shown only once, store it now", "keyId", key.ID, "description", key.Description, "expiry", expiry)
	return nil
}
