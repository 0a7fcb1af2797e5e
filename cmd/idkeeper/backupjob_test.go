package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/backup"
)

// A bad backup setting is refused at start, before the store is touched, with a
// message that says what is wanted.
func TestBackupSettingsAreCheckedAtStart(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--backup-schedule", "61 * * * *"}, nil, `--backup-schedule "61 * * * *": end of range (61) above maximum (59): 61; want a cron expression of 5 fields in UTC`},
		{[]string{"--backup-schedule", "0 3 * *"}, nil, "want a cron expression of 5 fields in UTC"},
		{[]string{"--backup-schedule", "0 0 3 * * *"}, nil, "want a cron expression of 5 fields in UTC"},
		{[]string{"--backup-schedule", "@fortnightly"}, nil, "@daily, @hourly, @every 6h"},
		{[]string{"--backup-schedule", "TZ=Europe/Paris 0 3 * * *"}, nil, "the schedule is always in UTC"},
		{[]string{"--backup-schedule", "0 0 30 2 *"}, nil, `--backup-schedule "0 0 30 2 *" never fires`},
		{nil, map[string]string{"IDKEEPER_BACKUP_SCHEDULE": "nonsense"}, `--backup-schedule "nonsense"`},
		{[]string{"--backup-keep", "-1"}, nil, "--backup-keep -1: want 0 (no limit) or more"},
		{[]string{"--backup-max-age", "-1h"}, nil, "--backup-max-age -1h0m0s"},
	} {
		dir := t.TempDir()
		db := filepath.Join(dir, "idkeeper.db")
		args := append([]string{"server", "--listen", "127.0.0.1:0", "--store", "bolt:" + db, "--backup-dir", filepath.Join(dir, "b")}, c.args...)
		code, _, stderr := runInProcess(context.Background(), args, c.env)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v %v: exit %d, %q; want 2 and %q", c.args, c.env, code, stderr, c.want)
		}
		if _, err := os.Stat(db); err == nil {
			t.Errorf("%v: the store file was created before the settings were checked", c.args)
		}
	}
	db := filepath.Join(t.TempDir(), "idkeeper.db")
	code, _, stderr := runInProcess(context.Background(), []string{"server", "--listen", "127.0.0.1:0", "--store", "bolt:" + db,
		"--backup-schedule", "@daily"}, nil)
	if code != exitUsage || !strings.Contains(stderr, `--backup-schedule "@daily" needs --backup-dir`) {
		t.Errorf("a schedule without a folder: exit %d, %q", code, stderr)
	}
	// The schedules that parse: 5 fields, descriptors, @every.
	for _, spec := range []string{"0 3 * * *", "*/15 * * * 1-5", "@daily", "@hourly", "@weekly", "@every 6h", " @every 1s "} {
		if _, _, err := parseBackupSchedule(spec, time.Now()); err != nil {
			t.Errorf("%q: %v", spec, err)
		}
	}
}

// metricValue reads one sample of the text exposition.
func metricValue(t *testing.T, text, name string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no %s in the metrics", name)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A server with --backup-dir and a schedule writes backups into the folder on
// its own, keeps --backup-keep of them, reports them in /metrics and lists them
// through the admin API, which also backs up on demand and downloads.
func TestScheduledBackups(t *testing.T) {
	dir := t.TempDir()
	store := "bolt:" + filepath.Join(dir, "idkeeper.db")
	folder := filepath.Join(dir, "backups")
	initInProcess(t, store)
	s, code := startInProcess(t, []string{"--store", store, "--backup-dir", folder, "--backup-schedule", "@every 1s",
		"--backup-keep", "2"}, map[string]string{AdminKeyEnv: adminKey})
	if s.base == "" {
		t.Fatalf("server exited with %d:\n%s", code, s.logs)
	}
	// Three scheduled backups: the retention has deleted at least one.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(s.logs.String(), "backup retention deleted old backups") {
		if time.Now().After(deadline) {
			t.Fatalf("no scheduled backups pruned:\n%s", s.logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	es, err := backup.Folder{Dir: folder}.List()
	if err != nil || len(es) < 2 || len(es) > 3 || !es[0].Compressed || es[0].SHA256 == "" {
		t.Fatalf("the folder holds %+v, %v", es, err)
	}
	if fi, err := os.Stat(folder); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("folder %v %v", fi, err)
	}
	c := s.client(adminKey)
	metrics := c.raw("GET", "/metrics")
	if metricValue(t, metrics, "idkeeper_backup_last_success_timestamp_seconds") < float64(time.Now().Add(-time.Minute).Unix()) ||
		metricValue(t, metrics, "idkeeper_backup_bytes") <= 0 || metricValue(t, metrics, "idkeeper_backup_failures_total") != 0 ||
		metricValue(t, metrics, "idkeeper_backup_duration_seconds") <= 0 {
		t.Fatalf("metrics:\n%s", metrics)
	}
	list := c.do("GET", "/admin/api/backups", "", 200)
	if list["enabled"] != true || list["schedule"] != "@every 1s" || list["keep"] != 2.0 || list["dir"] != folder ||
		list["nextRun"] == nil || list["lastSuccess"] == nil {
		t.Fatalf("list %v", list)
	}
	if code := s.stop(); code != exitOK {
		t.Fatalf("exit %d:\n%s", code, s.logs)
	}
	logs := s.logs.String()
	for _, want := range []string{`"msg":"backups scheduled"`, `"msg":"backup written"`, `"by":"system"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log lacks %s", want)
		}
	}
	if strings.Contains(logs, `"msg":"backup failed"`) {
		t.Errorf("a backup failed:\n%s", logs)
	}
	// Nothing half-written is left behind by the stop.
	des, _ := os.ReadDir(folder)
	for _, de := range des {
		if !backup.ValidName(de.Name()) {
			t.Errorf("left in the folder: %s", de.Name())
		}
	}

	// Restarted without the flag, the server keeps the store's schedule; turned
	// off through the API, it backs up manually only (every second of the schedule
	// above had its backup, so a manual one there would meet its name).
	s, code = startInProcess(t, []string{"--store", store, "--backup-dir", folder, "--backup-keep", "0"},
		map[string]string{AdminKeyEnv: adminKey})
	if s.base == "" {
		t.Fatalf("server exited with %d:\n%s", code, s.logs)
	}
	c = s.client(adminKey)
	if list := c.do("GET", "/admin/api/backups", "", 200); list["schedule"] != "@every 1s" || list["nextRun"] == nil {
		t.Fatalf("list after a restart without --backup-schedule %v", list)
	}
	if off := c.do("PUT", "/admin/api/backups/schedule", `{"schedule":"off","version":1}`, 200); off["schedule"] != "off" ||
		off["version"] != 2.0 {
		t.Fatalf("PUT off: %v", off)
	}
	if list := c.do("GET", "/admin/api/backups", "", 200); list["schedule"] != "" || list["nextRun"] != nil || list["keep"] != 0.0 {
		t.Fatalf("list %v", list)
	}
	// The folder's newest backup stands for the last success after the restart.
	if v := metricValue(t, c.raw("GET", "/metrics"), "idkeeper_backup_last_success_timestamp_seconds"); v < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Fatalf("last success after a restart: %v", v)
	}
	// The first server's last scheduled run keeps the job lock for up to 0.9 s
	// (so that other replicas skip its time): 409 until then.
	var name string
	for i := 0; name == "" && i < 10; i++ {
		req, _ := http.NewRequest("POST", s.base+"/admin/api/backups", nil)
		req.Header.Set("X-API-Key", adminKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusCreated:
			name = regexp.MustCompile(`"name":"([^"]+)"`).FindStringSubmatch(string(body))[1]
		case http.StatusConflict:
			time.Sleep(300 * time.Millisecond)
		default:
			t.Fatalf("POST /admin/api/backups: %d %s", resp.StatusCode, body)
		}
	}
	if !backup.ValidName(name) {
		t.Fatalf("created %q", name)
	}
	req, _ := http.NewRequest("GET", s.base+"/admin/api/backups/"+name, nil)
	req.Header.Set("X-API-Key", adminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("download: %d", resp.StatusCode)
	}
	if _, err := backup.Verify(strings.NewReader(string(data))); err != nil {
		t.Fatalf("the downloaded backup: %v", err)
	}
	if code := s.stop(); code != exitOK {
		t.Fatalf("exit %d:\n%s", code, s.logs)
	}
	if logs := s.logs.String(); !strings.Contains(logs, `"msg":"backup schedule from the store: off, manual backups only"`) ||
		!strings.Contains(logs, `"by":"key:`) {
		t.Errorf("the log:\n%s", logs)
	}
}
