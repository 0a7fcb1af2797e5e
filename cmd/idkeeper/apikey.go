package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idkeeper/idkeeper"
)

const apikeyUsage = `Usage:
  idkeeper apikey create --description TEXT [--expires 720h] [--max-nodes N] [--store …]
  idkeeper apikey list [--format table|json] [--store …]
  idkeeper apikey revoke ID [--store …]

create makes an API key for the /v1 API and prints it once on standard output. Only
its hash is stored: a lost key cannot be shown again, only replaced. --max-nodes is
the key's quota: the most node IDs its leases may hold at once (0: none).

list shows every key: its ID, description, creation, expiry, last use, quota, the
node IDs its leases hold now, and whether it is active, expired or revoked.

revoke ends a key at once: every request with it is refused (401). Its leases are
not taken away: their holders cannot renew them and stop at their expiry; the
server reclaims the node IDs after expiry + grace. A revoked key stays listed.
`

// runAPIKey is the apikey command: create, list, revoke.
func runAPIKey(ctx context.Context, args []string, env lookupEnv, stdout, stderr io.Writer) error {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprint(stdout, apikeyUsage)
		return nil
	}
	var sub string
	if len(args) > 0 {
		sub = args[0]
	}
	switch sub {
	case "create":
		return runAPIKeyCreate(ctx, args[1:], env, stdout, stderr)
	case "list":
		return runAPIKeyList(ctx, args[1:], env, stdout, stderr)
	case "revoke":
		return runAPIKeyRevoke(ctx, args[1:], env, stdout, stderr)
	}
	fmt.Fprint(stderr, apikeyUsage)
	return usagef("apikey: want the subcommand create, list or revoke")
}

// keyStoreFlags are the flags of every command that works on a store without
// serving it (apikey, init): the store and logging.
type keyStoreFlags struct {
	store, redisPrefix string
	storeFlag          *secretFlag
	log                logFlags
}

func (k *keyStoreFlags) register(fs *flag.FlagSet) {
	k.storeFlag = secretVar(fs, &k.store, "store", DefaultStore, "the store: bolt:PATH, redis://… or rediss://… (a bolt file must not be open in a running server)", urlHasPassword)
	fs.StringVar(&k.redisPrefix, "redis-prefix", "", "prefix of every Redis key, as given to the server")
	k.log.register(fs)
}

func (k *keyStoreFlags) open(ctx context.Context, stderr io.Writer) (idkeeper.Store, error) {
	log := k.log.logger(stderr)
	if err := resolveSecrets(log, k.storeFlag); err != nil {
		return nil, err
	}
	return openStore(ctx, k.store, storeOptions{Logger: log, RedisPrefix: k.redisPrefix})
}

func runAPIKeyCreate(ctx context.Context, args []string, env lookupEnv, stdout, stderr io.Writer) error {
	fs := newFlagSet("apikey create", stderr)
	var kf keyStoreFlags
	kf.register(fs)
	desc := fs.String("description", "", "what the key is for, shown to operators (required)")
	expires := fs.Duration("expires", 720*time.Hour, "lifetime of the key; 0: never expires")
	maxNodes := fs.Int("max-nodes", 0, "the key's quota: the most node IDs its leases may hold at once; 0: no quota")
	if err := parseFlags(fs, args, env); err != nil {
		return err
	}
	if strings.TrimSpace(*desc) == "" {
		return usagef("apikey create: --description is required")
	}
	if *expires < 0 {
		return usagef("apikey create: --expires %s is negative; want 0 (never expires) or a positive duration", expires)
	}
	if *maxNodes < 0 || *maxNodes > idkeeper.DefaultLayout.Nodes() {
		return usageError{&idkeeper.RangeError{Setting: "max-nodes", Value: strconv.Itoa(*maxNodes), Min: "0", Max: strconv.Itoa(idkeeper.DefaultLayout.Nodes())}}
	}
	s, err := kf.open(ctx, stderr)
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
	key.MaxNodes = *maxNodes
	if err := s.CreateAPIKey(ctx, key); err != nil {
		return fmt.Errorf("store the API key: %w", err)
	}
	fmt.Fprintln(stdout, secret)
	expiry := "never expires"
	if !until.IsZero() {
		expiry = "expires " + until.Format(time.RFC3339)
	}
	kf.log.logger(stderr).Info("API key created; it is shown only once, store it now", "keyId", key.ID,
		"description", key.Description, "expiry", expiry, "maxNodes", key.MaxNodes)
	return nil
}

// keyRow is one key as apikey list shows it.
type keyRow struct {
	ID          string     `json:"id"`
	Description string     `json:"description"`
	Status      string     `json:"status"` // active, expired, revoked
	Bootstrap   bool       `json:"bootstrap"`
	CreatedAt   time.Time  `json:"createdAt"`
	ExpiresAt   *time.Time `json:"expiresAt"`
	LastUsedAt  *time.Time `json:"lastUsedAt"`
	RevokedAt   *time.Time `json:"revokedAt"`
	MaxNodes    int        `json:"maxNodes"` // 0: no quota
	NodesHeld   int        `json:"nodesHeld"`
}

func optional(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func runAPIKeyList(ctx context.Context, args []string, env lookupEnv, stdout, stderr io.Writer) error {
	fs := newFlagSet("apikey list", stderr)
	var kf keyStoreFlags
	kf.register(fs)
	format := fs.String("format", "table", "output format: table or json")
	if err := parseFlags(fs, args, env); err != nil {
		return err
	}
	if *format != "table" && *format != "json" {
		return usagef("apikey list: --format %q: want table or json", *format)
	}
	s, err := kf.open(ctx, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	keys, err := s.APIKeys(ctx)
	if err != nil {
		return fmt.Errorf("read the API keys: %w", err)
	}
	held, err := s.KeyHoldings(ctx)
	if err != nil {
		return fmt.Errorf("read the leases: %w", err)
	}
	now := time.Now()
	rows := make([]keyRow, len(keys))
	for i, k := range keys {
		st := "active"
		switch {
		case k.Revoked():
			st = "revoked"
		case k.Expired(now):
			st = "expired"
		}
		rows[i] = keyRow{ID: k.ID, Description: k.Description, Status: st, Bootstrap: k.Bootstrap, CreatedAt: k.CreatedAt,
			ExpiresAt: optional(k.ExpiresAt), LastUsedAt: optional(k.LastUsedAt), RevokedAt: optional(k.RevokedAt),
			MaxNodes: k.MaxNodes, NodesHeld: held[k.ID]}
	}
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tDESCRIPTION\tCREATED\tEXPIRES\tLAST USED\tQUOTA\tHELD")
	show := func(t *time.Time, none string) string {
		if t == nil {
			return none
		}
		return t.UTC().Format("2006-01-02 15:04Z")
	}
	for _, r := range rows {
		quota := "-"
		if r.MaxNodes > 0 {
			quota = strconv.Itoa(r.MaxNodes)
		}
		st := r.Status
		if r.Bootstrap {
			st += " (bootstrap)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", r.ID, st, oneLine(r.Description), show(&r.CreatedAt, ""),
			show(r.ExpiresAt, "never"), show(r.LastUsedAt, "never"), quota, r.NodesHeld)
	}
	return tw.Flush()
}

// oneLine keeps a description on one table row.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func runAPIKeyRevoke(ctx context.Context, args []string, env lookupEnv, stdout, stderr io.Writer) error {
	var id string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		id, args = args[0], args[1:]
	}
	fs := newFlagSet("apikey revoke", stderr)
	var kf keyStoreFlags
	kf.register(fs)
	if err := parseFlags(fs, args, env); err != nil {
		return err
	}
	if id == "" {
		return usagef("apikey revoke: want the ID of the key (see apikey list)")
	}
	s, err := kf.open(ctx, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	k, err := s.APIKey(ctx, id)
	if errors.Is(err, idkeeper.ErrNotFound) {
		return fmt.Errorf("apikey revoke: there is no key %q (see apikey list)", id)
	}
	if err != nil {
		return fmt.Errorf("read the API key: %w", err)
	}
	if k.Revoked() {
		fmt.Fprintf(stdout, "key %s was revoked already, at %s\n", id, k.RevokedAt.UTC().Format(time.RFC3339))
		return nil
	}
	if err := s.RevokeAPIKey(ctx, id, time.Now()); err != nil {
		return fmt.Errorf("revoke the API key: %w", err)
	}
	held, _ := s.KeyHoldings(ctx)
	fmt.Fprintf(stdout, "revoked key %s (%s); its leases (%d node IDs) end at their expiry\n", id, oneLine(k.Description), held[id])
	return nil
}
