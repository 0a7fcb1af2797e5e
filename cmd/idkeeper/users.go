package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/user"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/password"
	"github.com/idkeeper/idkeeper/protocol"
)

const usersUsage = `Usage:
  idkeeper users list [--format table|json]            [--store … | --server URL]
  idkeeper users add NAME --role viewer|operator|admin [--password-file FILE] [--store … | --server URL]
  idkeeper users disable NAME                           [--store … | --server URL]
  idkeeper users enable NAME                            [--store … | --server URL]
  idkeeper users set-role NAME viewer|operator|admin    [--store … | --server URL]
  idkeeper users reset-password NAME [--password-file FILE] [--store … | --server URL]

The accounts of the admin web (/admin/). A viewer reads every page; an operator
also manages API keys, the IP allow-list and leases; an admin also manages
accounts. Disabling an account, a new role and a new password end its sessions.
The last enabled admin can be neither disabled nor demoted.

Passwords (12 to 1024 bytes) are read from --password-file or from standard input
(the first line; pipe it in), never from the command line. Only their Argon2id
hash is stored.

Where: --store works on the store directly (a bolt file only while no server holds
it), as the operator of the store: the audit log names the actor
"operator:<your OS user>". On an empty store, add the first admin this way.
--server URL works through a running registry server's admin API: accounts are
changed by an admin who logs in, --login-user NAME with its password in
IDKEEPER_LOGIN_PASSWORD, IDKEEPER_LOGIN_PASSWORD_FILE or --login-password-file;
list works with an admin API key too (IDKEEPER_ADMIN_API_KEY, as for apikey).
--server-ca-file trusts the CA of an https:// server.
`

// stdin is where passwords are read from when no --password-file is given.
var stdin io.Reader = os.Stdin

// runUsers is the users command.
func runUsers(ctx context.Context, args []string, env lookupEnv, stdout, stderr io.Writer) error {
	sub, args, done, err := subcommand("users", usersUsage,
		[]string{"list", "add", "disable", "enable", "set-role", "reset-password"}, args, stdout, stderr)
	if done || err != nil {
		return err
	}
	nargs := map[string]int{"list": 0, "add": 1, "disable": 1, "enable": 1, "set-role": 2, "reset-password": 1}[sub]
	var pos []string
	for len(pos) < nargs && len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		pos, args = append(pos, args[0]), args[1:]
	}
	fs := newFlagSet("users "+sub, stderr)
	var uf usersFlags
	uf.register(fs)
	format := fs.String("format", "table", "output format of list: table or json")
	role := fs.String("role", "", "the role of a new account: viewer, operator or admin")
	pwFile := fs.String("password-file", "", "file whose first line is the password (default: read it from standard input)")
	if err := parseFlags(fs, args, env); err != nil {
		return err
	}
	if len(pos) < nargs {
		what := map[int]string{1: "the user's NAME", 2: "the user's NAME and the ROLE"}[nargs]
		return usagef("users %s: want %s", sub, what)
	}
	if sub == "add" && *role == "" {
		return usagef("users add: --role is required: viewer, operator or admin")
	}
	if *format != "table" && *format != "json" {
		return usagef("users list: --format %q: want table or json", *format)
	}
	var pw string
	if sub == "add" || sub == "reset-password" {
		var err error
		if pw, err = readPassword(*pwFile); err != nil {
			return err
		}
	}
	b, err := uf.backend(ctx, stderr)
	if err != nil {
		return err
	}
	defer b.Close()
	var u userRow
	switch sub {
	case "list":
		rows, err := b.list(ctx)
		if err != nil {
			return err
		}
		return printUsers(stdout, rows, *format)
	case "add":
		if u, err = b.add(ctx, pos[0], account.Role(*role), pw); err == nil {
			fmt.Fprintf(stdout, "added user %s (role %s)\n", u.Name, u.Role)
		}
	case "disable", "enable":
		if u, err = b.setDisabled(ctx, pos[0], sub == "disable"); err == nil {
			fmt.Fprintf(stdout, "user %s: %sd\n", u.Name, sub)
		}
	case "set-role":
		if u, err = b.setRole(ctx, pos[0], account.Role(pos[1])); err == nil {
			fmt.Fprintf(stdout, "user %s: role %s\n", u.Name, u.Role)
		}
	case "reset-password":
		if u, err = b.resetPassword(ctx, pos[0], pw); err == nil {
			fmt.Fprintf(stdout, "user %s: password reset; its sessions have ended\n", u.Name)
		}
	}
	if protocol.ErrorCode(err) == protocol.CodeInvalidRequest {
		return usageError{err}
	}
	return err
}

// readPassword returns the first line of file, or of standard input when file is
// "". A terminal is refused: it would echo the password.
func readPassword(file string) (string, error) {
	r := stdin
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return "", usagef("--password-file: %v", err)
		}
		defer f.Close()
		r = f
	} else if f, ok := stdin.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			return "", usagef("the password comes from --password-file or is piped into standard input, not typed on a terminal")
		}
	}
	line, err := bufio.NewReaderSize(io.LimitReader(r, account.MaxPasswordLen+2), account.MaxPasswordLen+2).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read the password: %w", err)
	}
	pw := strings.TrimRight(line, "\r\n")
	if pw == "" {
		return "", usagef("no password: give --password-file or pipe the password into standard input")
	}
	if err := account.CheckPassword("password", pw); err != nil {
		return "", usageError{err}
	}
	if password.IsCommon(pw) {
		return "", usageError{account.PasswordTooCommon("password")}
	}
	return pw, nil
}

// userRow is one account as users list shows it.
type userRow struct {
	Name              string     `json:"name"`
	Role              string     `json:"role"`
	Disabled          bool       `json:"disabled"`
	CreatedAt         time.Time  `json:"createdAt"`
	CreatedBy         string     `json:"createdBy"`
	PasswordChangedAt *time.Time `json:"passwordChangedAt"`
	LastLoginAt       *time.Time `json:"lastLoginAt"`
}

func userRowOf(u account.User) userRow {
	return userRow{Name: u.Name, Role: string(u.Role), Disabled: u.Disabled, CreatedAt: u.CreatedAt, CreatedBy: u.CreatedBy,
		PasswordChangedAt: optional(u.PasswordChangedAt), LastLoginAt: optional(u.LastLoginAt)}
}

func printUsers(w io.Writer, rows []userRow, format string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tROLE\tSTATUS\tCREATED\tBY\tLAST LOGIN")
	for _, r := range rows {
		status, by, last := "enabled", r.CreatedBy, "never"
		if r.Disabled {
			status = "disabled"
		}
		if by == "" {
			by = "(first admin)"
		}
		if r.LastLoginAt != nil {
			last = r.LastLoginAt.UTC().Format("2006-01-02 15:04Z")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Role, status, r.CreatedAt.UTC().Format("2006-01-02 15:04Z"), by, last)
	}
	return tw.Flush()
}

// usersBackend is where the users commands find the accounts: a store (as its
// operator), or a running server's admin API with --server.
type usersBackend interface {
	list(ctx context.Context) ([]userRow, error)
	add(ctx context.Context, name string, role account.Role, password string) (userRow, error)
	setDisabled(ctx context.Context, name string, disabled bool) (userRow, error)
	setRole(ctx context.Context, name string, role account.Role) (userRow, error)
	resetPassword(ctx context.Context, name, password string) (userRow, error)
	Close() error
}

// loginPasswordEnv names the environment variable of --login-password.
var loginPasswordEnv = envName("login-password")

// usersFlags are the flags of the users commands: those of apikey (the store, or
// a server and its admin API key), and the admin account to log in as on a server.
type usersFlags struct {
	keyFlags
	loginUser, loginPassword string
	loginPasswordFlag        *secretFlag
}

func (f *usersFlags) register(fs *flag.FlagSet) {
	f.keyFlags.register(fs)
	fs.StringVar(&f.loginUser, "login-user", "", "with --server: log in as this admin account, which changes accounts "+
		"(an admin API key may only list them); its password from "+loginPasswordEnv+" or --login-password-file")
	f.loginPasswordFlag = secretVar(fs, &f.loginPassword, "login-password", "", "the password of --login-user (prefer "+
		"--login-password-file or "+loginPasswordEnv+": a flag shows in ps)", always)
}

// backend opens where the accounts are: the server's admin API with --server (as
// --login-user, or with the admin API key), else the store.
func (f *usersFlags) backend(ctx context.Context, stderr io.Writer) (usersBackend, error) {
	k := &f.keyFlags
	if k.server == "" {
		if f.loginUser != "" {
			return nil, usagef("--login-user is for --server; on --store the command acts as the store's operator")
		}
		s, err := k.open(ctx, stderr)
		if errors.Is(err, bolt.ErrLocked) {
			return nil, fmt.Errorf("%w; to manage accounts while the server runs, give --server URL and --login-user (see users -h)", err)
		}
		if err != nil {
			return nil, err
		}
		return newStoreUsers(s, k.log.logger(stderr))
	}
	if k.storeFlag.argv || k.storeFlag.file != "" {
		return nil, usagef("give --store or --server, not both")
	}
	log := k.log.logger(stderr)
	if f.loginUser == "" {
		if err := resolveSecrets(log, k.adminKeyFlag); err != nil {
			return nil, err
		}
		c, err := newServerKeys(k.server, k.serverCA, k.adminKey)
		if err != nil {
			return nil, err
		}
		return &serverUsers{c: c}, nil
	}
	if err := resolveSecrets(log, f.loginPasswordFlag); err != nil {
		return nil, err
	}
	if f.loginPassword == "" {
		return nil, usagef("--login-user needs its password: set %s or %s_FILE, or give --login-password-file", loginPasswordEnv, loginPasswordEnv)
	}
	c, err := newAdminClient(k.server, k.serverCA)
	if err != nil {
		return nil, err
	}
	b := &serverUsers{c: c}
	if err := b.login(ctx, f.loginUser, f.loginPassword); err != nil {
		c.Close()
		return nil, err
	}
	b.loggedIn = true
	return b, nil
}

// storeUsers are the accounts of a store opened by this command, changed as its
// operator (account.OperatorActor).
type storeUsers struct {
	s     idkeeper.Store
	acc   *account.Service
	actor account.User
}

func newStoreUsers(s idkeeper.Store, log *slog.Logger) (usersBackend, error) {
	as, ok := s.(account.Store)
	if !ok {
		_ = s.Close()
		return nil, errors.New("this store keeps no accounts")
	}
	acc, err := account.New(as, password.Hasher{}, account.Config{Logger: log})
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	return storeUsers{s: s, acc: acc, actor: account.OperatorActor(osUser())}, nil
}

// osUser names the operating system's user running the command, for the audit
// log: "unknown" when it cannot be told.
func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "unknown"
}

func (b storeUsers) Close() error { return b.s.Close() }

func (b storeUsers) list(ctx context.Context) ([]userRow, error) {
	us, err := b.acc.Users(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the accounts: %w", err)
	}
	rows := make([]userRow, len(us))
	for i, u := range us {
		rows[i] = userRowOf(u)
	}
	return rows, nil
}

func (b storeUsers) add(ctx context.Context, name string, role account.Role, pw string) (userRow, error) {
	u, err := b.acc.CreateUser(ctx, b.actor, name, role, pw)
	return userRowOf(u), err
}

func (b storeUsers) setDisabled(ctx context.Context, name string, disabled bool) (userRow, error) {
	u, err := b.acc.SetDisabled(ctx, b.actor, name, disabled)
	return userRowOf(u), err
}

func (b storeUsers) setRole(ctx context.Context, name string, role account.Role) (userRow, error) {
	u, err := b.acc.SetRole(ctx, b.actor, name, role)
	return userRowOf(u), err
}

func (b storeUsers) resetPassword(ctx context.Context, name, pw string) (userRow, error) {
	u, err := b.acc.ResetPassword(ctx, b.actor, name, pw)
	return userRowOf(u), err
}

// serverUsers are the accounts of a running registry server, managed through its
// admin API with the client of the apikey commands.
type serverUsers struct {
	c        *serverKeys
	loggedIn bool // through login: Close logs out
}

func (b *serverUsers) Close() error {
	if b.loggedIn {
		b.logout()
	}
	return b.c.Close()
}

// login opens a session as name: the admin API lets only people change accounts,
// never an API key.
func (b *serverUsers) login(ctx context.Context, name, pw string) error {
	var ans wire.LoginResponse
	if err := b.c.do(ctx, http.MethodPost, "login", wire.LoginRequest{Name: name, Password: pw}, http.StatusOK, &ans); err != nil {
		return fmt.Errorf("log in as %s: %w", name, err)
	}
	return nil
}

// logout ends the session of login, if any; failures are the server's to clean
// up (the session times out).
func (b *serverUsers) logout() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = b.c.do(ctx, http.MethodPost, "logout", nil, http.StatusNoContent, nil)
}

func (b *serverUsers) list(ctx context.Context) ([]userRow, error) {
	var ans wire.UserList
	if err := b.c.do(ctx, http.MethodGet, "users", nil, http.StatusOK, &ans); err != nil {
		return nil, err
	}
	rows := make([]userRow, len(ans.Users))
	for i, u := range ans.Users {
		var err error
		if rows[i], err = userRowFromWire(u); err != nil {
			return nil, err
		}
	}
	return rows, nil
}

func (b *serverUsers) add(ctx context.Context, name string, role account.Role, pw string) (userRow, error) {
	var ans wire.User
	hdr := http.Header{"Idempotency-Key": {idempotencyKey()}}
	err := b.c.doWith(ctx, http.MethodPost, "users", hdr, wire.CreateUserRequest{Name: name, Role: string(role), Password: pw},
		http.StatusCreated, &ans)
	if err != nil {
		return userRow{}, b.hint(err)
	}
	return userRowFromWire(ans)
}

func (b *serverUsers) update(ctx context.Context, name string, req wire.UpdateUserRequest) (userRow, error) {
	var ans wire.User
	if err := b.c.do(ctx, http.MethodPost, "users/"+url.PathEscape(name), req, http.StatusOK, &ans); err != nil {
		return userRow{}, b.hint(err)
	}
	return userRowFromWire(ans)
}

func (b *serverUsers) setDisabled(ctx context.Context, name string, disabled bool) (userRow, error) {
	return b.update(ctx, name, wire.UpdateUserRequest{Disabled: &disabled})
}

func (b *serverUsers) setRole(ctx context.Context, name string, role account.Role) (userRow, error) {
	return b.update(ctx, name, wire.UpdateUserRequest{Role: string(role)})
}

func (b *serverUsers) resetPassword(ctx context.Context, name, pw string) (userRow, error) {
	err := b.c.do(ctx, http.MethodPost, "users/"+url.PathEscape(name)+"/password", wire.ResetPasswordRequest{Password: pw},
		http.StatusNoContent, nil)
	if err != nil {
		return userRow{}, b.hint(err)
	}
	return userRow{Name: name}, nil
}

// hint adds what to do to a refusal of a change made with an admin API key.
func (b *serverUsers) hint(err error) error {
	var ae *adminError
	if b.c.key != "" && errors.As(err, &ae) && ae.status == http.StatusForbidden {
		return fmt.Errorf("%w (accounts are changed by an admin who logs in: give --login-user NAME and the "+
			"password in %s or %s_FILE, or --login-password-file)", err, loginPasswordEnv, loginPasswordEnv)
	}
	return err
}

// idempotencyKey is a random Idempotency-Key for one create.
func idempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// userRowFromWire is an account of the admin API as users list shows it.
func userRowFromWire(u wire.User) (userRow, error) {
	created, err := wire.ParseTime(u.CreatedAt)
	if err != nil {
		return userRow{}, fmt.Errorf("the server's answer: user %s: createdAt: %w", u.Name, err)
	}
	row := userRow{Name: u.Name, Role: u.Role, Disabled: u.Disabled, CreatedAt: created, CreatedBy: u.CreatedBy}
	for _, f := range []struct {
		name string
		in   *string
		out  **time.Time
	}{{"lastLoginAt", u.LastLoginAt, &row.LastLoginAt}, {"passwordChangedAt", u.PasswordChangedAt, &row.PasswordChangedAt}} {
		if f.in == nil {
			continue
		}
		t, err := wire.ParseTime(*f.in)
		if err != nil {
			return userRow{}, fmt.Errorf("the server's answer: user %s: %s: %w", u.Name, f.name, err)
		}
		*f.out = &t
	}
	return row, nil
}
