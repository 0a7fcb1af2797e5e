package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper/backup"
	idkhttp "github.com/idkeeper/idkeeper/http"
	"github.com/idkeeper/idkeeper/internal/wire"
)

// backup export|import --server URL: through a running server's admin API (GET
// /admin/api/backup, POST /admin/api/restore) with an admin API key, as apikey
// --server works: what works while the server holds a bolt file, and on Redis
// without stopping the replicas.

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
	from := sum.Header.Store + " through " + redactURL(kf.server)
	if _, params, perr := mime.ParseMediaType(resp.Header.Get("Content-Disposition")); perr == nil && params["filename"] != "" {
		from += " (" + params["filename"] + ")"
	}
	fmt.Fprintf(stdout, "exported %s\n  from %s, generation #%d (%s), fencing counter %d\n  to %s: %d bytes (content %d bytes, sha256 %s)\n",
		sum.Counts, from, m.Generation.Number, m.Generation.Origin, m.Fence, out, size, sum.Bytes, sum.SHA256)
	return nil
}

// importViaServer uploads f (the file in, checked already) to the server, which
// restores it with its own lease duration and grace, and prints the server's
// summary as an offline import prints its own.
func importViaServer(ctx context.Context, kf *keyFlags, in string, f *os.File, stdout, stderr io.Writer) error {
	b, err := kf.adminServer(stderr)
	if err != nil {
		return err
	}
	defer b.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("backup import: %w", err)
	}
	resp, err := b.stream(ctx, http.MethodPost, "restore", bufio.NewReaderSize(f, 256<<10), st.Size(), http.StatusOK)
	if err != nil {
		return fmt.Errorf("backup import: %s refused by the server: %w; nothing was written", in, err)
	}
	defer resp.Body.Close()
	var r wire.Restore
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&r); err != nil {
		return fmt.Errorf("backup import: the server restored %s, but its answer is not the expected JSON: %w", in, err)
	}
	c := backup.Counts{Nodes: r.Records.Nodes, Leases: r.Records.Leases, Keys: r.Records.Keys, Users: r.Records.Users,
		Allow: r.Records.Allow, Audit: r.Records.Audit}
	fmt.Fprintf(stdout, "imported %s\n  from %s (taken %s on %s, generation #%d, sha256 %s)\n  through %s by %s at %s\n"+
		"  the store's generation is now #%d (recovered), its fencing counter %d\n",
		c, in, rfc3339(r.Backup.TakenAt), r.Backup.Store, r.Backup.Generation, r.SHA256, redactURL(kf.server), r.Actor,
		rfc3339(r.At), r.Generation, r.FencingCounter)
	until := rfc3339(r.QuarantineEnd)
	if r.Quarantined.Count > 0 {
		fmt.Fprintf(stdout, "node IDs %s quarantined until %s", shortRangeList(r.Quarantined.Nodes), until)
	} else {
		fmt.Fprintf(stdout, "no free node IDs to quarantine")
	}
	fmt.Fprintf(stdout, "; %d leases kept for their holders", r.Kept.Count)
	if r.Kept.Count > 0 {
		fmt.Fprintf(stdout, " (node IDs %s, %d not yet expired; each quarantined until %s when freed)",
			shortRangeList(r.Kept.Nodes), r.Live, until)
	}
	fmt.Fprintf(stdout, "\nthe server planned it with its own --lease-duration %v --cleanup-grace %v; every replica meets the "+
		"new generation as a store reset, and the admin web's sessions ended (log in again)\n",
		time.Duration(r.LeaseDurationMs)*time.Millisecond, time.Duration(r.GraceMs)*time.Millisecond)
	return nil
}

// rfc3339 is a wire time as the offline commands print times.
func rfc3339(s string) string {
	t, err := wire.ParseTime(s)
	if err != nil {
		return s
	}
	return t.UTC().Format(time.RFC3339)
}

// shortRangeList is a list of ranges ("0-3,7,9-12"), at most 12 of them and how
// many more, as shortRanges prints backup.NodeRanges.
func shortRangeList(s string) string {
	const most = 12
	parts := strings.Split(s, ",")
	if len(parts) <= most {
		return s
	}
	return fmt.Sprintf("%s,… (%d more ranges)", strings.Join(parts[:most], ","), len(parts)-most)
}
