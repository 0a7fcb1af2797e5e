package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper"
)

// devKeyFile holds the dev command's API key inside its data directory, so that a
// restarted `idkeeper dev` keeps the key the developer already pasted somewhere.
const devKeyFile = "dev-api-key"

// runDev is the dev command: a registry server on the embedded store in a data
// directory, with an API key made on first start and printed with ready-to-paste
// commands. It serves until ctx ends.
func runDev(ctx context.Context, args []string, env lookupEnv, stdout, stderr io.Writer) error {
	fs := newFlagSet("dev", stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "address of the registry's REST API, host:port")
	data := fs.String("data", "./data", "directory of the embedded store and the dev API key")
	var lf logFlags
	lf.register(fs)
	if err := parseFlags(fs, args, env); err != nil {
		return err
	}
	if err := os.MkdirAll(*data, 0o700); err != nil {
		return fmt.Errorf("create the data directory: %w", err)
	}
	key, err := devAPIKey(*data, env)
	if err != nil {
		return err
	}
	v, c := buildVersion()
	srv, err := startRegistryServer(ctx, serverConfig{
		Listen:          *listen,
		Store:           "bolt:" + filepath.Join(*data, "idkeeper.db"),
		BootstrapAPIKey: key,
		ShutdownTimeout: 5 * time.Second,
		Version:         v,
		Commit:          c,
		Logger:          lf.logger(stderr),
	})
	if err != nil {
		return err
	}
	base := "http://" + srv.Addr().String()
	fmt.Fprintf(stdout, `IdKeeper %s is running on the embedded store %s

  registry  %s
  API key   %s

Try it:
  curl -s -H 'X-API-Key: %s' %s/v1/leases/remaining
  curl -s -H 'X-API-Key: %s' -H 'Content-Type: application/json' %s/v1/leases \
       -d '{"requester":{"machineId":"my-laptop","pid":1234,"startedAt":"%s"},"count":2}'

Stop with Ctrl-C.
`, v, filepath.Join(*data, "idkeeper.db"), base, key, key, base, key, base,
		idkeeper.Millis(time.Now()).Format("2006-01-02T15:04:05.000Z"))
	return srv.wait(ctx)
}

// devAPIKey returns IDKEEPER_BOOTSTRAP_API_KEY when set, else the key kept in the
// data directory, making and saving one (mode 0600) on first use.
func devAPIKey(dir string, env lookupEnv) (string, error) {
	if k, ok := env(BootstrapKeyEnv); ok && k != "" {
		return k, nil
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
