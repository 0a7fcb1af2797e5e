package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/gateway"
	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/server"
)

// devKeyFile holds the dev command's API key inside its data directory, so that a
// restarted `idkeeper dev` keeps the key the developer already pasted somewhere.
const devKeyFile = "dev-api-key"

// devConfig is what dev's flags and environment say.
type devConfig struct {
	server              server.Config // the registry on the embedded store
	gwListen            string
	gwNodes, gwNodesMax int
	data                string
	adminPW             string
	generated           bool // adminPW was made now: the banner shows it once
	version, commit     string
}

// runDev is the dev command: a registry server on the embedded store in a data
// directory (initialised on first start, with the replica state and the receipt
// secret beside it), with an API key and the first admin made on first start, and a
// gateway in the same process holding a lease from it; it prints both URLs, the
// admin web's and its login (the password only when it was made) with ready-to-paste
// commands once the gateway can issue IDs. It serves until ctx ends, then stops
// the gateway (which gives its node ID back) before the registry. If the gateway
// loses its lease, dev stops too and exits with status 1.
func runDev(ctx context.Context, args []string, env lookupEnv, stdout, stderr io.Writer) error {
	d, err := parseDev(args, env, stderr)
	if err != nil {
		return err
	}
	log := d.server.Logger
	// dev hosts the gateway: its process collects garbage as a gateway's does.
	applyGCPercent(env, DefaultGCPercent, log)
	srv, err := server.Open(ctx, d.server)
	if err != nil {
		return err
	}
	base := "http://" + srv.Addr().String()
	gw, err := startGateway(gatewayConfig{
		Listen:             d.gwListen,
		ServerURL:          base,
		APIKey:             d.server.BootstrapAPIKey,
		NodeIDs:            d.gwNodes,
		NodeIDsMax:         d.gwNodesMax,
		MaxCount:           gateway.DefaultMaxCount,
		IdempotencyStore:   "bolt:" + filepath.Join(d.data, "gateway-idem.db"),
		IdempotencyTTL:     idempotency.DefaultTTL,
		IdempotencyRecords: gateway.DefaultIdempotencyMaxRecords,
		ShutdownTimeout:    5 * time.Second,
		Version:            d.version,
		Commit:             d.commit,
		Logger:             log,
	})
	if err != nil {
		return errors.Join(err, srv.Close())
	}
	if err := gw.waitOpen(ctx); err != nil {
		if ctx.Err() != nil { // stopped while starting
			return errors.Join(gw.shutdown(), srv.Close())
		}
		return errors.Join(fmt.Errorf("the gateway could not lease a node ID: %w", err), gw.shutdown(), srv.Close())
	}
	login := "as before"
	switch {
	case srv.CreatedFirstAdmin() && d.generated:
		login = DefaultAdminUser + " / " + d.adminPW + "  (shown only this once: only its hash is stored)"
	case srv.CreatedFirstAdmin():
		login = DefaultAdminUser + " / the password in " + AdminPasswordEnv
	}
	// Like any write to stdout, the banner's failing is no reason to stop serving.
	_ = devBanner.Execute(stdout, devInfo{
		Version:    d.version,
		AdminUser:  DefaultAdminUser,
		Store:      filepath.Join(d.data, "idkeeper.db"),
		Registry:   base,
		APIKey:     d.server.BootstrapAPIKey,
		Gateway:    "http://" + dialable(gw.Addr()),
		Admin:      base + "/admin/",
		AdminLogin: login,
		Now:        wire.FormatTime(time.Now()),
	})
	gwErr := gw.wait(ctx)
	// The registry stops after the gateway, which gives its node ID back first.
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	return errors.Join(gwErr, srv.Serve(stopped))
}

// parseDev reads dev's flags and environment, makes the data directory and the
// dev API key, and returns the registry's and the gateway's settings.
func parseDev(args []string, env lookupEnv, stderr io.Writer) (devConfig, error) {
	var d devConfig
	fs := newFlagSet("dev", stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "address of the registry's REST API, host:port")
	fs.StringVar(&d.gwListen, "gateway-listen", "127.0.0.1:8081", "address of the gateway, host:port")
	fs.IntVar(&d.gwNodes, "gateway-node-ids", 1, "node IDs the gateway leases, each good for 1,024,000 IDs/s")
	fs.IntVar(&d.gwNodesMax, "gateway-node-ids-max", 0, "lease more node IDs for the gateway on demand, up to this many (its --node-ids-max); 0: off")
	fs.StringVar(&d.data, "data", "./data", "directory of the embedded store, the gateway's idempotency records and the dev API key")
	var pf poolFlags
	pf.register(fs)
	var kq keyQuotaFlag
	kq.register(fs)
	var lf logFlags
	lf.register(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, devUsage)
		printFlags(stderr, fs)
	}
	if err := parseFlags(fs, args, env); err != nil {
		return d, err
	}
	// The store of a fresh data directory is initialised with this pool (its layout
	// checked as a new one then); an existing one must have the same range and layout.
	pool, err := pf.spec()
	if err != nil {
		return d, err
	}
	if d.gwNodes < 1 || d.gwNodes > protocol.MaxCount {
		return d, usageError{&idkeeper.RangeError{Setting: "gateway-node-ids", Value: strconv.Itoa(d.gwNodes), Min: "1", Max: strconv.Itoa(protocol.MaxCount)}}
	}
	if d.gwNodesMax != 0 && (d.gwNodesMax < d.gwNodes || d.gwNodesMax > protocol.MaxCount) {
		return d, usageError{&idkeeper.RangeError{Setting: "gateway-node-ids-max", Value: strconv.Itoa(d.gwNodesMax), Min: strconv.Itoa(d.gwNodes) + " (--gateway-node-ids)", Max: strconv.Itoa(protocol.MaxCount)}}
	}
	if err := os.MkdirAll(d.data, 0o700); err != nil {
		return d, fmt.Errorf("create the data directory: %w", err)
	}
	key, err := devAPIKey(d.data, env)
	if err != nil {
		return d, err
	}
	// The first admin: IDKEEPER_ADMIN_PASSWORD, or a password made now, used only
	// when the store holds no account yet.
	if d.adminPW, err = envSecret(env, AdminPasswordEnv); err != nil {
		return d, err
	}
	if d.generated = d.adminPW == ""; d.generated {
		d.adminPW = newAdminPassword()
	}
	d.version, d.commit = buildVersion()
	rc := idkeeper.Config{Layout: pool.Layout, First: pool.First, Nodes: pool.Nodes}
	kq.apply(&rc)
	d.server = server.Config{
		Listen:          *listen,
		Store:           "bolt:" + filepath.Join(d.data, "idkeeper.db"),
		InitStore:       true, // dev's own embedded store; a server waits for `idkeeper init`
		Registry:        rc,
		KeepStoredSize:  !pf.given("nodes") && !pf.given("node-range"),
		BootstrapAPIKey: key,
		AdminUser:       DefaultAdminUser,
		AdminPassword:   d.adminPW,
		ShutdownTimeout: 5 * time.Second,
		Version:         d.version,
		Commit:          d.commit,
		Logger:          lf.logger(stderr),
		Env:             env,
	}
	return d, nil
}

// devInfo fills devBanner.
type devInfo struct {
	Version string // of the binary
	// AdminUser is the first admin's name, for the password reset's command.
	AdminUser string
	Store     string // the bolt file
	Registry  string // base URL of the registry API
	APIKey    string
	Gateway   string // base URL of the gateway
	Now       string // in the API's time format, for the example requester's startedAt
	// Admin is the admin web's URL; AdminLogin its first admin's name and password
	// when this start created it, else "as before".
	Admin, AdminLogin string
}

// devBanner is what dev prints once the gateway can issue IDs: the URLs, the key,
// the admin login and commands to paste.
var devBanner = template.Must(template.New("dev").Parse(`IdKeeper {{.Version}} is running on the embedded store {{.Store}}

  registry  {{.Registry}}
  API key   {{.APIKey}}
  gateway   {{.Gateway}}
  admin     {{.Admin}}
  admin login: {{.AdminLogin}}

Get IDs from the gateway:
  curl -s -X POST -H 'Content-Type: application/json' {{.Gateway}}/v1/ids -d '{"count":5}'
  curl -s -X POST -H 'Content-Type: application/json' '{{.Gateway}}/v1/ids?format=string' -d '{"count":5}'
  curl -s {{.Gateway}}/v1/ids/<an ID>
  curl -s {{.Gateway}}/health

Talk to the registry with the API key:
  curl -s -H 'X-API-Key: {{.APIKey}}' {{.Registry}}/v1/leases/remaining
  curl -s -H 'X-API-Key: {{.APIKey}}' -H 'Content-Type: application/json' {{.Registry}}/v1/leases \
       -d '{"requester":{"machineId":"my-laptop","pid":1234,"startedAt":"{{.Now}}"},"count":2}'

Lost the admin password? Stop dev, then set a new one (read from standard input):
  idkeeper users reset-password {{.AdminUser}} --store bolt:{{.Store}}

Stop with Ctrl-C.
`))

// devUsage heads dev's -h, before its flags.
var devUsage = `Usage: idkeeper dev [flags]

Runs a registry server on the embedded store in --data (initialised on first
start), a gateway leasing from it, and the admin web; prints the URLs, an API key
and, on first start, the admin login (` + DefaultAdminUser + `, with a password shown once or the one
in ` + AdminPasswordEnv + `). A lost admin password is reset with dev stopped:
  idkeeper users reset-password ` + DefaultAdminUser + ` --store bolt:DATA/idkeeper.db
(the new password read from standard input or --password-file).

`

// dialable is addr as a client reaches it: an unspecified host (":8081",
// "0.0.0.0:8081") becomes localhost.
func dialable(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}

// devAPIKey returns IDKEEPER_BOOTSTRAP_API_KEY (or the content of the file
// IDKEEPER_BOOTSTRAP_API_KEY_FILE names) when set, else the key kept in the data
// directory, making and saving one (mode 0600) on first use.
func devAPIKey(dir string, env lookupEnv) (string, error) {
	if k, err := envSecret(env, BootstrapKeyEnv); err != nil || k != "" {
		return k, err
	}
	path := filepath.Join(dir, devKeyFile)
	b, err := os.ReadFile(path)
	if err == nil && len(strings.TrimSpace(string(b))) >= idkeeper.MinAPIKeyLen {
		return strings.TrimSpace(string(b)), nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read the dev API key: %w", err)
	}
	key, _ := idkeeper.NewAPIKey("dev", time.Now(), time.Time{})
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("save the dev API key: %w", err)
	}
	return key, nil
}

// newAdminPassword returns a random password for dev's first admin: 16 bytes,
// base64url.
func newAdminPassword() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
