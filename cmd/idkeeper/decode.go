package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/idkeeper/idkeeper/internal/plural"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/snowflake"
)

// The decode command splits IDs into their time, node ID and sequence, offline
// (issue #16, "ID provenance"); with --origin it also asks the registry which
// lease held the node ID when the ID was minted.

const decodeUsage = `Usage: idkeeper decode [flags] ID…
       idkeeper decode [flags] < FILE

Decodes Snowflake IDs: prints each ID's time (UTC, milliseconds), node ID and
sequence, one line per ID; without --server it needs nothing but the IDs. The IDs
come from the arguments or, with none (or the argument -), from standard input,
separated by blanks or line ends (at most 100000 IDs, lines of at most 64 KiB). An
ID is written in decimal digits, bare or as a JSON string ("…", as the gateway's
format=string answers give it).

The layout is the default one (epoch 2026-01-01T00:00:00.000Z, 41 timestamp,
12 node and 10 sequence bits) changed by the layout flags, or, with --server, the
one the registry (or a gateway) answers on GET /v1/version. A wrong layout gives
wrong parts, not an error: every non-negative 63-bit number decodes.

With --origin (it needs --server and an admin API key: IDKEEPER_ADMIN_API_KEY,
IDKEEPER_ADMIN_API_KEY_FILE or --admin-api-key-file), each ID is followed by the
leases that held its node ID when it was minted, as the registry knows them.

A bad ID is reported on standard error and the other IDs are still decoded; the
exit status is then 1 (2 for a usage error).

  idkeeper decode 120610764938543104
  idkeeper decode --json < ids.txt
  idkeeper decode --node-bits 10 --sequence-bits 12 120610764938543104
  idkeeper decode --server http://127.0.0.1:8080 --origin 120610764938543104

Flags (each also from the environment variable shown):
`

// Bounds of the input.
const (
	maxDecodeLine = 64 << 10 // bytes of one line of standard input
	maxDecodeIDs  = 100_000  // IDs of one run
)

// decodeFlags are the decode command's flags.
type decodeFlags struct {
	epoch                                 string
	timestampBits, nodeBits, sequenceBits int
	json, origin                          bool
	server, serverCA, adminKey            string
	adminKeyFlag                          *secretFlag
	log                                   logFlags
}

// layoutFlagNames are the flags that change the layout.
var layoutFlagNames = []string{"epoch", "timestamp-bits", "node-bits", "sequence-bits"}

func (d *decodeFlags) register(fs *flag.FlagSet) {
	l := idkeeper.DefaultLayout
	fs.StringVar(&d.epoch, "epoch", wire.FormatTime(l.Epoch), "the layout's epoch: a date (midnight UTC) or an RFC 3339 time to the millisecond; millisecond 0 of the timestamp field")
	fs.IntVar(&d.timestampBits, "timestamp-bits", l.TimestampBits, "the layout's timestamp width in bits; the three widths add up to 63")
	fs.IntVar(&d.nodeBits, "node-bits", l.NodeBits, "the layout's node ID width in bits, 1..32")
	fs.IntVar(&d.sequenceBits, "sequence-bits", l.SequenceBits, "the layout's sequence width in bits, 1..32")
	fs.BoolVar(&d.json, "json", false, `print one JSON object per ID: {"id":"…","time":"…","timestampMs":…,"nodeId":…,"sequence":…}`)
	fs.BoolVar(&d.origin, "origin", false, "also print the leases that held each ID's node ID when it was minted (needs --server and an admin API key)")
	fs.StringVar(&d.server, "server", "", "take the layout from this registry's (or gateway's) GET /v1/version (http:// or https:// base URL) instead of the layout flags")
	fs.StringVar(&d.serverCA, "server-ca-file", "", "PEM bundle of the CAs to trust for an https:// --server, besides the system's")
	d.adminKeyFlag = secretVar(fs, &d.adminKey, "admin-api-key", "", "admin API key for --origin (prefer --admin-api-key-file or "+AdminKeyEnv+": a flag shows in ps)", always)
	d.log.register(fs)
}

// printDecodeUsage writes decodeUsage and the flags, in newFlagSet's format.
func printDecodeUsage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprint(w, decodeUsage)
	fs.VisitAll(func(f *flag.Flag) {
		def := ""
		if f.DefValue != "" {
			def = " (default " + f.DefValue + ")"
		}
		fmt.Fprintf(w, "  --%s  [%s]%s\n    \t%s\n", f.Name, envName(f.Name), def, f.Usage)
	})
}

// splitDecodeArgs tells the IDs among args from the flags, so that flags may come
// before, between or after the IDs: "-" and an argument that does not start with
// "-" are IDs, and so is a "-" followed by digits only (a negative number, refused
// as an ID rather than as an unknown flag); "--" ends the flags. A flag that takes
// a value and is not written --flag=value takes the next argument.
func splitDecodeArgs(fs *flag.FlagSet, args []string) (flags, ids []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return flags, append(ids, args[i+1:]...)
		case a == "-" || !strings.HasPrefix(a, "-") || strings.Trim(a[1:], "0123456789") == "":
			ids = append(ids, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			continue // parsing reports it
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			continue
		}
		if i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	return flags, ids
}

// runDecode is the decode command.
func runDecode(ctx context.Context, args []string, env lookupEnv, stdout, stderr io.Writer) error {
	fs := newFlagSet("decode", stderr)
	var df decodeFlags
	df.register(fs)
	fs.Usage = func() { printDecodeUsage(fs, stderr) }
	flagArgs, idArgs := splitDecodeArgs(fs, args)
	if err := parseFlags(fs, flagArgs, env); err != nil {
		return err
	}
	layoutGiven := false
	fs.Visit(func(f *flag.Flag) { layoutGiven = layoutGiven || slices.Contains(layoutFlagNames, f.Name) })
	switch {
	case df.origin && df.server == "":
		return usagef("decode: --origin needs --server URL: the registry that granted the leases")
	case layoutGiven && df.server != "":
		return usagef("decode: give the layout flags or --server, not both (the server tells its layout)")
	}
	if len(idArgs) > maxDecodeIDs {
		return usagef("decode: %d IDs as arguments, at most %d: pass more on standard input, in parts", len(idArgs), maxDecodeIDs)
	}

	var layout snowflake.Layout
	var admin *serverKeys
	if df.server == "" {
		var err error
		if layout, err = df.layout(); err != nil {
			return err
		}
	} else {
		var err error
		if df.origin {
			if err = resolveSecrets(df.log.logger(stderr), df.adminKeyFlag); err != nil {
				return err
			}
			admin, err = newServerKeys(df.server, df.serverCA, df.adminKey)
		} else {
			admin, err = newAdminClient(df.server, df.serverCA)
		}
		if err != nil {
			return err
		}
		defer admin.Close()
		if layout, err = fetchLayout(ctx, admin); err != nil {
			return fmt.Errorf("decode: the layout from %s: %w", admin.base, err)
		}
	}

	out := bufio.NewWriter(stdout)
	defer out.Flush()
	d := &decoder{ctx: ctx, layout: layout, json: df.json, out: out, stderr: stderr}
	if df.origin {
		d.admin = admin
	}
	d.nodeWidth = len(strconv.FormatInt(layout.MaxNode(), 10))

	var err error
	if len(idArgs) == 0 || (len(idArgs) == 1 && idArgs[0] == "-") {
		err = d.decodeStream(stdin)
	} else {
		for _, a := range idArgs {
			if err = d.decode(a, ""); err != nil {
				break
			}
		}
	}
	if ferr := out.Flush(); err == nil && ferr != nil {
		err = fmt.Errorf("decode: write the output: %w", ferr)
	}
	if err != nil {
		return err
	}
	if d.failed > 0 {
		return fmt.Errorf("decode: %d of %s failed (see above)", d.failed, plural.N(d.seen, "ID", "IDs"))
	}
	return nil
}

// layout is the layout the flags give: the default with the flags given changed.
// A bad one is a usage error.
func (d *decodeFlags) layout() (snowflake.Layout, error) {
	// The epoch as server, init and dev take it: a date or RFC 3339 to the millisecond.
	epoch, err := snowflake.ParseEpoch(d.epoch)
	if err != nil {
		return snowflake.Layout{}, usagef("decode: --epoch: %v", err)
	}
	l := snowflake.Layout{Epoch: epoch, TimestampBits: d.timestampBits, NodeBits: d.nodeBits, SequenceBits: d.sequenceBits}
	if err := l.Validate(); err != nil {
		return snowflake.Layout{}, usagef("decode: the layout flags (--epoch, --timestamp-bits, --node-bits, --sequence-bits): %v", err)
	}
	return l, nil
}

// fetchLayout reads the layout from the server's GET /v1/version, which needs no
// key (none is sent).
func fetchLayout(ctx context.Context, b *serverKeys) (snowflake.Layout, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.base+"/v1/version", nil)
	if err != nil {
		return snowflake.Layout{}, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := b.hc.Do(req)
	if err != nil {
		return snowflake.Layout{}, fmt.Errorf("reach the server: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return snowflake.Layout{}, fmt.Errorf("read the server's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return snowflake.Layout{}, answerError(resp, data)
	}
	var v wire.VersionResponse
	if err := json.Unmarshal(data, &v); err != nil {
		return snowflake.Layout{}, fmt.Errorf("GET /v1/version: the answer is not the expected JSON: %w", err)
	}
	if v.Layout == nil {
		return snowflake.Layout{}, errors.New("GET /v1/version names no layout (a gateway before its first lease?); retry, or give the layout flags instead of --server")
	}
	epoch, err := wire.ParseTime(v.Layout.Epoch)
	if err != nil {
		return snowflake.Layout{}, fmt.Errorf("GET /v1/version: layout.epoch: %w", err)
	}
	l := snowflake.Layout{Epoch: epoch, TimestampBits: v.Layout.TimestampBits, NodeBits: v.Layout.NodeBits, SequenceBits: v.Layout.SequenceBits}
	if err := l.Validate(); err != nil {
		return snowflake.Layout{}, fmt.Errorf("GET /v1/version: %w", err)
	}
	return l, nil
}

// decoder decodes IDs one by one and prints them.
type decoder struct {
	ctx       context.Context
	layout    snowflake.Layout
	json      bool
	admin     *serverKeys // with --origin: where the leases are looked up; else nil
	out       *bufio.Writer
	stderr    io.Writer
	nodeWidth int // digits of the layout's largest node ID, for aligned text

	seen, failed int // IDs read, and those not decoded
}

// decodedJSON is an ID as --json prints it; TimestampMs is the timestamp field,
// milliseconds since the layout's epoch.
type decodedJSON struct {
	ID          string `json:"id"`
	Time        string `json:"time"`
	TimestampMs int64  `json:"timestampMs"`
	NodeID      int64  `json:"nodeId"`
	Sequence    int64  `json:"sequence"`
}

// decodeStream decodes the IDs of r: separated by blanks or line ends, lines of at
// most maxDecodeLine bytes.
func (d *decoder) decodeStream(r io.Reader) error {
	if f, ok := r.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			fmt.Fprintln(d.stderr, "idkeeper: decode: reading IDs from the terminal, one or more per line; end with Ctrl-D")
		}
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxDecodeLine+2) // the line, "\r\n"
	line := 0
	for sc.Scan() {
		line++
		if len(sc.Bytes()) > maxDecodeLine {
			return fmt.Errorf("decode: standard input, line %d: longer than %d KiB", line, maxDecodeLine>>10)
		}
		for _, tok := range strings.FieldsFunc(sc.Text(), isASCIISpace) {
			if err := d.decode(tok, fmt.Sprintf("line %d: ", line)); err != nil {
				return err
			}
		}
	}
	if errors.Is(sc.Err(), bufio.ErrTooLong) {
		return fmt.Errorf("decode: standard input, line %d: longer than %d KiB", line+1, maxDecodeLine>>10)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("decode: read standard input: %w", err)
	}
	return nil
}

func isASCIISpace(r rune) bool { return r == ' ' || (r >= '\t' && r <= '\r') }

// decode decodes one ID and prints it, with its leases under --origin. A bad ID
// is reported on stderr (where: its place in the input, or "") and counted; the
// error returned ends the run: too many IDs, the context ended, a lookup that no
// other ID would pass either.
func (d *decoder) decode(s, where string) error {
	if err := d.ctx.Err(); err != nil {
		return err
	}
	if d.seen == maxDecodeIDs {
		return fmt.Errorf("decode: more than %d IDs; decode them in parts", maxDecodeIDs)
	}
	d.seen++
	id, err := snowflake.ParseID(s)
	var p snowflake.Parts
	if err == nil {
		p, err = d.layout.Decode(id)
	}
	if err != nil {
		d.fail(where, err)
		return nil
	}
	var ans originAnswer
	if d.admin != nil {
		ans, err = lookupOrigin(d.ctx, d.admin, id)
		if err != nil {
			if !originErrorIsPerID(err) {
				if ae := (*adminError)(nil); errors.As(err, &ae) && ae.status == http.StatusNotFound {
					err = fmt.Errorf("%w (a server without GET %sids/{id}/origin: older than this command?)", err, wire.AdminAPIPrefix)
				}
				return fmt.Errorf("decode: the origin of %d: %w", id, err)
			}
			if !d.json { // the offline part still holds
				d.printDecoded(id, p)
			}
			d.fail(where, fmt.Errorf("the origin of %d: %w", id, err))
			return nil
		}
	}
	switch {
	case d.admin != nil && d.json:
		d.out.Write(ans.raw)
		d.out.WriteByte('\n')
	case d.admin != nil:
		d.printDecoded(id, p)
		d.printLeases(ans)
	default:
		d.printDecoded(id, p)
	}
	return nil
}

// fail reports an ID that was not decoded, in order with the output.
func (d *decoder) fail(where string, err error) {
	d.failed++
	d.out.Flush()
	fmt.Fprintf(d.stderr, "idkeeper: decode: %s%v\n", where, err)
}

func (d *decoder) printDecoded(id int64, p snowflake.Parts) {
	if d.json {
		b, _ := json.Marshal(decodedJSON{ID: strconv.FormatInt(id, 10), Time: wire.FormatTime(p.Time),
			TimestampMs: p.Timestamp, NodeID: p.Node, Sequence: p.Sequence}) // plain values: never fails
		d.out.Write(b)
		d.out.WriteByte('\n')
		return
	}
	fmt.Fprintf(d.out, "%-19d  %s  node %-*d  seq %d\n", id, wire.FormatTime(p.Time), d.nodeWidth, p.Node, p.Sequence)
}

// printLeases writes the leases of an origin answer under the decoded line, one
// line each, or that none is known.
func (d *decoder) printLeases(a originAnswer) {
	if len(a.Leases) == 0 {
		if a.Note == "" {
			fmt.Fprintln(d.out, "  lease: none known")
			return
		}
		fmt.Fprintf(d.out, "  lease: none known (%s)\n", printableText(a.Note))
		return
	}
	for _, l := range a.Leases {
		fmt.Fprintf(d.out, "  lease: %s\n", describeLease(l))
	}
}

// originAnswer is the answer of GET /admin/api/ids/{id}/origin (wire.IDOrigin)
// with its raw JSON, for --json.
type originAnswer struct {
	wire.IDOrigin
	raw []byte // the answer as the server sent it (compact JSON)
}

// describeLease is the lease on one line:
//
//	token T, requester M pid P started S instance I, key K, host H, labels k=v,…, window NB .. WE, granted G, held
//
// "held" becomes "ended END at T" for an ended lease; parts the server left empty
// are left out; "minted up to T" and "restored from a receipt" are added when
// they hold.
func describeLease(l wire.OriginLease) string {
	var b strings.Builder
	fmt.Fprintf(&b, "token %d, requester %s pid %d started %s", l.FencingToken, printable(l.Requester.MachineID),
		l.Requester.PID, printable(l.Requester.StartedAt))
	if l.Requester.Instance != "" {
		fmt.Fprintf(&b, " instance %s", printable(l.Requester.Instance))
	}
	if l.KeyID != "" {
		fmt.Fprintf(&b, ", key %s", printable(l.KeyID))
	}
	var c wire.Client
	if l.Client != nil {
		c = *l.Client
	}
	if c.Host != "" {
		fmt.Fprintf(&b, ", host %s", printable(c.Host))
	}
	if len(c.Labels) > 0 {
		kv := make([]string, 0, len(c.Labels))
		for _, k := range slices.Sorted(maps.Keys(c.Labels)) {
			kv = append(kv, printable(k)+"="+printable(c.Labels[k]))
		}
		fmt.Fprintf(&b, ", labels %s", strings.Join(kv, ","))
	}
	fmt.Fprintf(&b, ", window %s .. %s", printable(l.NotBefore), printable(l.WindowEnd))
	if l.GrantedAt != "" {
		fmt.Fprintf(&b, ", granted %s", printable(l.GrantedAt))
	}
	switch {
	case l.End == "":
		b.WriteString(", held")
	case l.EndedAt == "":
		fmt.Fprintf(&b, ", ended %s", printable(l.End))
	default:
		fmt.Fprintf(&b, ", ended %s at %s", printable(l.End), printable(l.EndedAt))
	}
	if l.MintedUpTo != "" {
		fmt.Fprintf(&b, ", minted up to %s", printable(l.MintedUpTo))
	}
	if l.FromReceipt {
		b.WriteString(", restored from a receipt")
	}
	return b.String()
}

// printable is s as a terminal may show it: as it is, or quoted when it is empty
// or holds a blank, a separator of describe (",", "="), or a character that is
// not printable (an escape sequence a client put in its labels).
func printable(s string) string {
	if s == "" || strings.ContainsFunc(s, func(r rune) bool { return r == ' ' || r == ',' || r == '=' || !unicode.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}

// printableText is a text of the server's (a note) as a terminal may show it: as
// it is, or quoted when it holds a character that is not printable.
func printableText(s string) string {
	if strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}

// lookupOrigin asks the registry (admin API, with the admin API key) which leases
// held the node ID of id when it was minted: GET /admin/api/ids/{id}/origin. The
// answer must be about id; its raw JSON is kept for --json.
func lookupOrigin(ctx context.Context, admin *serverKeys, id int64) (originAnswer, error) {
	var raw json.RawMessage
	if err := admin.do(ctx, http.MethodGet, "ids/"+strconv.FormatInt(id, 10)+"/origin", nil, http.StatusOK, &raw); err != nil {
		return originAnswer{}, err
	}
	var ans originAnswer
	if err := json.Unmarshal(raw, &ans); err != nil {
		return originAnswer{}, fmt.Errorf("the server's answer is not the expected JSON: %w", err)
	}
	if want := strconv.FormatInt(id, 10); ans.ID != want {
		return originAnswer{}, fmt.Errorf("the server answered about the ID %q, not %s", ans.ID, want)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return originAnswer{}, fmt.Errorf("the server's answer is not the expected JSON: %w", err)
	}
	ans.raw = compact.Bytes()
	return ans, nil
}

// originErrorIsPerID tells a lookup error that concerns the one ID (the server
// refused it: 400, 422) from one that every other ID would meet too (the server
// unreachable, the key refused, no such route, a server error), which ends the
// run.
func originErrorIsPerID(err error) bool {
	var ae *adminError
	return errors.As(err, &ae) && (ae.status == http.StatusBadRequest || ae.status == http.StatusUnprocessableEntity)
}
