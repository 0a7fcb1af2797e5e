package wire

// BackupFile is one backup of a server's backup folder (--backup-dir), in GET
// /admin/api/backups and the 201 answer of POST /admin/api/backups.
type BackupFile struct {
	Name    string `json:"name"`    // idkeeper-YYYYMMDDTHHMMSSZ-GENERATION.idkbackup[.gz]
	Bytes   int64  `json:"bytes"`   // the file's size on disk
	TakenAt string `json:"takenAt"` // when the snapshot was taken, to the second
	// Generation is the first 8 hex digits of the store's generation ID.
	Generation string `json:"generation"`
	Compressed bool   `json:"compressed"`
	// SHA256 and Records are what the file's trailer states: the checksum of its
	// content (uncompressed) and its number of records; "" and 0 when the trailer
	// cannot be read (a damaged file).
	SHA256  string `json:"sha256"`
	Records uint64 `json:"records"`
}

// BackupRun is the last run of the backup job on the server that answers.
type BackupRun struct {
	Actor      string      `json:"actor"` // "system" for a scheduled run, else "user:NAME" or "key:ID"
	Started    string      `json:"started"`
	DurationMs int64       `json:"durationMs"`
	OK         bool        `json:"ok"`
	Error      string      `json:"error,omitempty"` // why it failed
	Backup     *BackupFile `json:"backup"`          // null when it failed
	Pruned     []string    `json:"pruned"`          // the backups the retention deleted after it
}

// Backups is the 200 body of GET /admin/api/backups: the backup folder of the
// server that answers, its schedule and retention, and its backups, newest
// first. Enabled is false, and the rest empty, on a server started without
// --backup-dir.
type Backups struct {
	Enabled    bool    `json:"enabled"`
	Dir        string  `json:"dir"`
	Schedule   string  `json:"schedule"` // the cron expression, UTC; "": manual backups only
	NextRun    *string `json:"nextRun"`  // null without a schedule
	Keep       int     `json:"keep"`     // the newest kept; 0: no limit by count
	MaxAgeMs   int64   `json:"maxAgeMs"` // none older kept (never the newest); 0: no limit by age
	Compressed bool    `json:"compressed"`
	// LastRun is this server's last backup run since it started; null before one.
	// LastSuccess is when its last successful one started.
	LastRun     *BackupRun   `json:"lastRun"`
	LastSuccess *string      `json:"lastSuccess"`
	Backups     []BackupFile `json:"backups"`
}

// BackupSchedule is the 200 body of GET and PUT /admin/api/backups/schedule: the
// schedule of the scheduled backups kept in the store, for every replica.
type BackupSchedule struct {
	// Schedule is the cron expression (UTC) or descriptor, or "off" (manual
	// backups only), which a store that keeps none answers too.
	Schedule string `json:"schedule"`
	// Version is the store's: send it back with a change (0: none stored yet).
	Version   uint64  `json:"version"`
	UpdatedBy string  `json:"updatedBy"` // "user:NAME", "key:ID", "flag:REPLICA" for a --backup-schedule seed; "" when none stored
	UpdatedAt *string `json:"updatedAt"` // null when none stored
	// NextRuns are its next five times, UTC; empty when off.
	NextRuns []string `json:"nextRuns"`
	// RunsHere tells whether the replica that answers takes scheduled backups
	// (it was started with --backup-dir); Replica names it (its job lock owner).
	// Only such replicas run the schedule, one per time.
	RunsHere bool   `json:"runsHere"`
	Replica  string `json:"replica"`
}

// BackupScheduleRequest is the body of PUT /admin/api/backups/schedule.
type BackupScheduleRequest struct {
	Schedule string `json:"schedule"` // as BackupSchedule.Schedule: a cron expression (UTC), a descriptor, or "off"
	// Version is the Version read; the header If-Match may carry it instead.
	Version *uint64 `json:"version"`
}
