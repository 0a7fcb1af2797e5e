package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/idkeeper/idkeeper/backup"
	idkhttp "github.com/idkeeper/idkeeper/http"
	"github.com/idkeeper/idkeeper/server"
)

// backup export --server URL: through a running server's admin API (GET
// /admin/api/backup) with an admin API key, as apikey --server works: what works
// while the server holds a bolt file, and on Redis without stopping the
// replicas. An import through a server is refused (errImportViaServer).

// errImportViaServer is the answer of backup import --server (issue #29): a
// restore through a server takes an admin's login and their password again,
// which no API key carries.
var errImportViaServer = usagef("backup import --server: a restore through a running server takes an admin's " +
	"login and their password again, which no API key carries: restore through the admin web (Backups → Restore " +
	"from a backup: it previews what the restore replaces and quarantines) or POST /admin/api/restore/preview " +
	"then /admin/api/restore with an admin's session; or stop the servers and use backup import --store; nothing was written")

// adminServer is the admin API client of --server, with the admin key
// (AdminKeyEnv, --admin-api-key-file); --store given too is a usage error.
func (k *keyFlags) adminServer(stderr io.Writer) (*serverKeys, error) {
	if k.storeFlag.argv || k.storeFlag.file != "" {
		return nil, usagef("give --store or --server, not both")
	}
	if err := resolveSecrets(k.log.logger(stderr), k.adminKeyFlag); err != nil {
		return nil, err
	}
	return newServerKeys(k.server, k.serverCA, k.adminKey)
}

// stream sends a request to the admin route path whose body (none when nil) is
// no JSON, without the client's timeout (a backup takes as long as it takes;
// ctx ends it), and returns the answer of status want; any other answer is an
// *adminError.
func (b *serverKeys) stream(ctx context.Context, method, path string, body io.Reader, size int64, want int) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, b.base+idkhttp.AdminPrefix+path, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.ContentLength = size
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	req.Header.Set(idkhttp.APIKeyHeader, b.key)
	hc := *b.hc
	hc.Timeout = 0
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reach the server: %w", err)
	}
	if resp.StatusCode == want {
		return resp, nil
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return nil, answerError(resp, data)
}

// exportViaServer downloads a backup of the server's store to out: FILE.tmp,
// checked whole as an import will check it, synced, then renamed to FILE. A
// FILE ending in .gz is asked for compressed (?gzip=1); any other travels
// gzip-encoded and is written plain.
func exportViaServer(ctx context.Context, kf *keyFlags, out string, stdout, stderr io.Writer) (err error) {
	b, err := kf.adminServer(stderr)
	if err != nil {
		return err
	}
	defer b.Close()
	path := "backup"
	if strings.HasSuffix(out, ".gz") {
		path += "?gzip=1"
	}
	resp, err := b.stream(ctx, http.MethodGet, path, nil, 0, http.StatusOK)
	if err != nil {
		return fmt.Errorf("backup export: %w (nothing written to %s)", err, out)
	}
	defer resp.Body.Close()
	tmp := out + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("backup export: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
			err = fmt.Errorf("backup export: %w (nothing written to %s)", err, out)
		}
	}()
	size, err := io.Copy(f, resp.Body)
	if err != nil {
		return fmt.Errorf("download the backup from the server: %w", err)
	}
	if _, err = f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	p := newProgress(stderr, "check")
	sum, err := backup.Verify(bufio.NewReaderSize(f, 256<<10), backup.WithProgress(p.update))
	p.done()
	if err != nil {
		return fmt.Errorf("the server's backup does not check: %w", err)
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, out); err != nil {
		return err
	}
	syncDir(filepath.Dir(out))
	m := sum.Header.Meta
	from := sum.Header.Store + " through " + server.RedactURL(kf.server)
	if _, params, perr := mime.ParseMediaType(resp.Header.Get("Content-Disposition")); perr == nil && params["filename"] != "" {
		from += " (" + params["filename"] + ")"
	}
	fmt.Fprintf(stdout, "exported %s\n  from %s, generation #%d (%s), fencing counter %d\n  to %s: %d bytes (content %d bytes, sha256 %s)\n",
		sum.Counts, from, m.Generation.Number, m.Generation.Origin, m.Fence, out, size, sum.Bytes, sum.SHA256)
	return nil
}
