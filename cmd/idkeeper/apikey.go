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
	"github.com/idkeeper/idkeeper/apikey"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/server"
)

const apikeyUsage = `Usage:
  idkeeper apikey create --description TEXT [--expires DURATION] [--max-nodes N] [--admin] [--store … | --server URL]
  idkeeper apikey list [--format table|json] [--store … | --server URL]
  idkeeper apikey revoke ID [--store … | --server URL]

create makes an API key for the /v1 API and prints it once on standard output. Only
its hash is stored: a lost key cannot be shown again, only replaced. A key never
expires unless --expires gives it a lifetime (e.g. 2160h); the server warns about
a key in use 14 days before it expires (log, metric, and a Warning header to its
clients). --max-nodes is the key's quota: the most node IDs its leases may hold at
once (0: none). --admin makes a key that may also use the admin API (/admin/api/):
manage keys on a running server.

list shows every key: its ID, description, creation, expiry, last use, quota, the
node IDs its leases hold now, and whether it is active, expired or revoked.

revoke ends a key at once: every request with it is refused (401). Its leases are
not taken away: their holders cannot renew them and stop at their expiry; the
server reclaims the node IDs after expiry + grace. A revoked key stays listed.

Where: --store works on the store directly (a bolt file only while no server holds
it). --server URL works through a running registry server's admin API, with an
admin API key from IDKEEPER_ADMIN_API_KEY, IDKEEPER_ADMIN_API_KEY_FILE or
--admin-api-key-file (never needed on the command line); --server-ca-file trusts
the CA of an https:// server. The output is the same either way.
`

// runAPIKey is the apikey command: create, list, revoke.
func runAPIKey(ctx context.Context, args []string, env lookupEnv, stdout, stderr io.Writer) error {
	sub, rest, done, err := subcommand("apikey", apikeyUsage, []string{"create", "list", "revoke"}, args, stdout, stderr)
	if done || err != nil {
		return err
	}
	switch sub {
	case "create":
		return runAPIKeyCreate(ctx, rest, env, stdout, stderr)
	case "list":
		return runAPIKeyList(ctx, rest, env, stdout, stderr)
	}
	return runAPIKeyRevoke(ctx, rest, env, stdout, stderr)
}

// keyStoreFlags are the flags of every command that works on a store without
// serving it (apikey, init): the store and logging.
type keyStoreFlags struct {
	store, redisPrefix string
	storeFlag          *secretFlag
	log                logFlags
	// create lets open make a missing bolt file (storeOptions.Create): init and
	// backup import only.
	create bool
}

func (k *keyStoreFlags) register(fs *flag.FlagSet) {
	k.storeFlag = secretVar(fs, &k.store, "store", DefaultStore, "the store: bolt:PATH, redis://…, redis+sentinel://…, redis+cluster://…, rediss…, etcd://…, etcds…, postgres://… or postgresql… (a bolt file must not be open in a running server)", urlHasPassword)
	fs.StringVar(&k.redisPrefix, "redis-prefix", "", "prefix of every Redis key, as given to the server")
	k.log.register(fs)
}

func (k *keyStoreFlags) open(ctx context.Context, stderr io.Writer) (idkeeper.Store, error) {
	log := k.log.logger(stderr)
	if err := resolveSecrets(log, k.storeFlag); err != nil {
		return nil, err
	}
	return server.OpenStore(ctx, k.store, server.StoreOptions{Logger: log, RedisPrefix: k.redisPrefix, Create: k.create})
}

// keyFlags are the flags of the apikey commands: where the keys are (a store, or
// a running server's admin API) and logging.
type keyFlags struct {
	keyStoreFlags
	server, serverCA, adminKey string
	adminKeyFlag               *secretFlag
}

func (k *keyFlags) register(fs *flag.FlagSet) {
	k.keyStoreFlags.register(fs)
	fs.StringVar(&k.server, "server", "", "work through this running registry server's admin API (http:// or https:// base URL) instead of --store")
	fs.StringVar(&k.serverCA, "server-ca-file", "", "PEM bundle of the CAs to trust for an https:// --server, besides the system's")
	k.adminKeyFlag = secretVar(fs, &k.adminKey, "admin-api-key", "", "admin API key for --server (prefer --admin-api-key-file or "+AdminKeyEnv+": a flag shows in ps)", always)
}

// backend opens where the keys are: the server's admin API with --server, else the
// store.
func (k *keyFlags) backend(ctx context.Context, stderr io.Writer) (keyBackend, error) {
	if k.server == "" {
		s, err := k.open(ctx, stderr)
		if errors.Is(err, bolt.ErrLocked) {
			return nil, fmt.Errorf("%w; to manage keys while the server runs, give --server URL and an admin key (see apikey -h)", err)
		}
		if err != nil {
			return nil, err
		}
		return storeKeys{s}, nil
	}
	if k.storeFlag.argv || k.storeFlag.file != "" {
		return nil, usagef("give --store or --server, not both")
	}
	if err := resolveSecrets(k.log.logger(stderr), k.adminKeyFlag); err != nil {
		return nil, err
	}
	return newServerKeys(k.server, k.serverCA, k.adminKey)
}

// keyBackend is where the apikey commands find the keys: a store (storeKeys) or a
// running server's admin API (serverKeys). Both answer alike.
type keyBackend interface {
	// create makes a key; expires 0: it never expires.
	create(ctx context.Context, description string, expires time.Duration, maxNodes int, admin bool) (secret string, k keyRow, err error)
	list(ctx context.Context) ([]keyRow, error)
	// revoke revokes a key unless it is revoked already; errNoKey when there is none.
	revoke(ctx context.Context, id string) (k keyRow, already bool, err error)
	Close() error
}

// errNoKey: there is no key with that ID.
var errNoKey = errors.New("no such key")

// storeKeys are the keys of a store opened by this command.
type storeKeys struct{ s idkeeper.Store }

func (b storeKeys) Close() error { return b.s.Close() }

func (b storeKeys) create(ctx context.Context, desc string, expires time.Duration, maxNodes int, admin bool) (string, keyRow, error) {
	// API keys are checked against the server's wall clock (Registry.Authenticate), so
	// their expiry is measured on it too.
	now := time.Now()
	spec := apikey.Spec{Description: desc, MaxNodes: maxNodes, Admin: admin, CreatedBy: idkeeper.CreatedByCLI}
	if expires > 0 {
		spec.ExpiresAt = now.Add(expires)
	}
	secret, k, err := apikey.Create(ctx, b.s, spec, now, idkeeper.DefaultLayout.Nodes())
	if err != nil {
		return "", keyRow{}, fmt.Errorf("store the API key: %w", err)
	}
	return secret, rowOf(idkeeper.KeyInfo{Key: k}, now), nil
}

func (b storeKeys) list(ctx context.Context) ([]keyRow, error) {
	keys, err := idkeeper.ListKeys(ctx, b.s)
	if err != nil {
		return nil, fmt.Errorf("read the API keys: %w", err)
	}
	now := time.Now()
	rows := make([]keyRow, len(keys))
	for i, k := range keys {
		rows[i] = rowOf(k, now)
	}
	return rows, nil
}

func (b storeKeys) revoke(ctx context.Context, id string) (keyRow, bool, error) {
	now := time.Now()
	k, already, err := apikey.Revoke(ctx, b.s, id, now)
	if errors.Is(err, idkeeper.ErrNotFound) {
		return keyRow{}, false, errNoKey
	}
	if err != nil {
		return keyRow{}, false, fmt.Errorf("revoke the API key: %w", err)
	}
	return rowOf(k, now), already, nil
}

// rowOf is k as apikey list shows it at now.
func rowOf(k idkeeper.KeyInfo, now time.Time) keyRow {
	return keyRow{ID: k.Key.ID, Description: k.Key.Description, Status: k.Key.Status(now), Bootstrap: k.Key.Bootstrap,
		Admin: k.Key.Admin, CreatedAt: k.Key.CreatedAt, ExpiresAt: optional(k.Key.ExpiresAt), LastUsedAt: optional(k.Key.LastUsedAt),
		RevokedAt: optional(k.Key.RevokedAt), MaxNodes: k.Key.MaxNodes, NodesHeld: k.NodesHeld}
}

func runAPIKeyCreate(ctx context.Context, args []string, env lookupEnv, stdout, stderr io.Writer) error {
	fs := newFlagSet("apikey create", stderr)
	var kf keyFlags
	kf.register(fs)
	desc := fs.String("description", "", "what the key is for, shown to operators (required)")
	expires := fs.Duration("expires", 0, "lifetime of the key, e.g. 2160h; 0: never expires")
	maxNodes := fs.Int("max-nodes", 0, "the key's quota: the most node IDs its leases may hold at once; 0: no quota")
	admin := fs.Bool("admin", false, "the key may also use the admin API (/admin/api/): manage keys on a running server")
	if err := parseFlags(fs, args, env); err != nil {
		return err
	}
	if strings.TrimSpace(*desc) == "" {
		return usagef("apikey create: --description is required")
	}
	if len(strings.TrimSpace(*desc)) > apikey.MaxDescriptionLen {
		return usagef("apikey create: --description is longer than %d bytes", apikey.MaxDescriptionLen)
	}
	if *expires < 0 {
		return usagef("apikey create: --expires %s is negative; want 0 (never expires) or a positive duration", expires)
	}
	if *maxNodes < 0 || *maxNodes > idkeeper.DefaultLayout.Nodes() {
		return usageError{&idkeeper.RangeError{Setting: "max-nodes", Value: strconv.Itoa(*maxNodes), Min: "0", Max: strconv.Itoa(idkeeper.DefaultLayout.Nodes())}}
	}
	b, err := kf.backend(ctx, stderr)
	if err != nil {
		return err
	}
	defer b.Close()
	secret, key, err := b.create(ctx, strings.TrimSpace(*desc), *expires, *maxNodes, *admin)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, secret)
	expiry := "never expires"
	if key.ExpiresAt != nil {
		expiry = "expires " + key.ExpiresAt.UTC().Format(time.RFC3339)
	}
	kf.log.logger(stderr).Info("API key created; it is shown only once, store it now", "keyId", key.ID,
		"description", key.Description, "expiry", expiry, "maxNodes", key.MaxNodes, "admin", key.Admin)
	return nil
}

// keyRow is one key as apikey list shows it.
type keyRow struct {
	ID          string     `json:"id"`
	Description string     `json:"description"`
	Status      string     `json:"status"` // active, expired, revoked
	Bootstrap   bool       `json:"bootstrap"`
	Admin       bool       `json:"admin"`
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
	var kf keyFlags
	kf.register(fs)
	format := fs.String("format", "table", "output format: table or json")
	if err := parseFlags(fs, args, env); err != nil {
		return err
	}
	if *format != "table" && *format != "json" {
		return usagef("apikey list: --format %q: want table or json", *format)
	}
	b, err := kf.backend(ctx, stderr)
	if err != nil {
		return err
	}
	defer b.Close()
	rows, err := b.list(ctx)
	if err != nil {
		return err
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
		var marks []string
		if r.Bootstrap {
			marks = append(marks, "bootstrap")
		}
		if r.Admin {
			marks = append(marks, "admin")
		}
		if len(marks) > 0 {
			st += " (" + strings.Join(marks, ", ") + ")"
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
	var kf keyFlags
	kf.register(fs)
	if err := parseFlags(fs, args, env); err != nil {
		return err
	}
	if id == "" {
		return usagef("apikey revoke: want the ID of the key (see apikey list)")
	}
	b, err := kf.backend(ctx, stderr)
	if err != nil {
		return err
	}
	defer b.Close()
	k, already, err := b.revoke(ctx, id)
	if errors.Is(err, errNoKey) {
		return fmt.Errorf("apikey revoke: there is no key %q (see apikey list)", id)
	}
	if err != nil {
		return err
	}
	if already {
		fmt.Fprintf(stdout, "key %s was revoked already, at %s\n", id, k.RevokedAt.UTC().Format(time.RFC3339))
		return nil
	}
	fmt.Fprintf(stdout, "revoked key %s (%s); its leases (%d node IDs) end at their expiry\n", id, oneLine(k.Description), k.NodesHeld)
	return nil
}
