package wire

// Restore is the answer of POST /admin/api/restore, and GET /admin/api/store's
// lastRestore: a backup file loaded into the live store and made safe with the
// registry's own lease duration and grace (docs/backup.md).
type Restore struct {
	At     string `json:"at"`     // when the store was replaced: the restore plan's time
	Actor  string `json:"actor"`  // who restored it: "user:NAME" or "key:ID"
	SHA256 string `json:"sha256"` // the checksum of the file's content, as its trailer states it
	Bytes  int64  `json:"bytes"`  // the content's size, uncompressed
	// Backup is where the file came from.
	Backup  RestoreBackup  `json:"backup"`
	Records RestoreRecords `json:"records"`
	// Generation is the store's generation number afterwards (origin recovered):
	// every registry that served the store meets it as a store reset.
	Generation     uint64 `json:"generation"`
	FencingCounter uint64 `json:"fencingCounter"`
	// LeaseDurationMs and GraceMs are the registry's, which the quarantine is made
	// of; QuarantineEnd is At + lease duration + grace, to which every node ID's
	// watermark floor was raised too.
	LeaseDurationMs int64  `json:"leaseDurationMs"`
	GraceMs         int64  `json:"graceMs"`
	QuarantineEnd   string `json:"quarantineEnd"`
	// Quarantined are the node IDs free in the backup, quarantined until
	// QuarantineEnd; Kept those whose leases the backup held, kept for their
	// holders (each quarantined until QuarantineEnd when it is freed), Live of them
	// not yet expired at At.
	Quarantined RestoreNodes `json:"quarantined"`
	Kept        RestoreNodes `json:"kept"`
	Live        int          `json:"live"`
}

// RestoreBackup is the header of a restored backup: when and from which store
// it was taken, and that store's generation number.
type RestoreBackup struct {
	TakenAt    string `json:"takenAt"`
	Store      string `json:"store"`
	Generation uint64 `json:"generation"`
}

// RestoreRecords counts a restored backup's records by kind; Leases are the node
// records that held one.
type RestoreRecords struct {
	Nodes  int `json:"nodes"`
	Leases int `json:"leases"`
	Keys   int `json:"keys"`
	Users  int `json:"users"`
	Allow  int `json:"allow"`
	Audit  int `json:"audit"`
}

// RestoreNodes are node IDs as ranges ("3-127,130"; "" for none) and their count.
type RestoreNodes struct {
	Nodes string `json:"nodes"`
	Count int    `json:"count"`
}

// RestorePreview is the answer of POST /admin/api/restore/preview (issue #29):
// what a restore of the uploaded backup would replace and quarantine, kept on
// this server until ExpiresAt for the confirmation (RestoreConfirm) by the same
// admin. Nothing was written.
type RestorePreview struct {
	Preview   string        `json:"preview"`   // the preview's ID, for the confirmation
	SHA256    string        `json:"sha256"`    // the checksum of the file's content, as its trailer states it
	Bytes     int64         `json:"bytes"`     // the content's size, uncompressed
	ExpiresAt string        `json:"expiresAt"` // until when it may be confirmed
	Actor     string        `json:"actor"`     // who previewed it: "user:NAME"
	Backup    RestoreBackup `json:"backup"`
	// Replaces is what the live store holds now, all replaced; With is what the
	// backup puts in its place.
	Replaces RestoreContents `json:"replaces"`
	With     RestoreContents `json:"with"`
	// Quarantined are the node IDs free in the backup, which the restore
	// quarantines until about QuarantineEnd (the confirmation's time + lease
	// duration + grace; this is the preview's time + both); Kept those it keeps
	// for their holders.
	LeaseDurationMs int64        `json:"leaseDurationMs"`
	GraceMs         int64        `json:"graceMs"`
	QuarantineEnd   string       `json:"quarantineEnd"`
	Quarantined     RestoreNodes `json:"quarantined"`
	Kept            RestoreNodes `json:"kept"`
}

// RestoreContents counts a store's or a backup's records by kind, with the users
// whose alert webhook is set.
type RestoreContents struct {
	RestoreRecords
	History  int `json:"history"`
	Webhooks int `json:"webhooks"`
}

// RestoreConfirm is the body of POST /admin/api/restore: the preview to apply,
// its checksum (the restore refuses any other file), and the admin's password.
type RestoreConfirm struct {
	Preview  string `json:"preview"`
	SHA256   string `json:"sha256"`
	Password string `json:"password"`
}
