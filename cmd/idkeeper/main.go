// Command idkeeper is the IdKeeper binary: the registry server, the ID gateway
// and the operator tools. main only parses flags and the environment and wires
// the packages together.
//
//	idkeeper dev             run everything locally on the embedded store
//	idkeeper init            initialise an empty store once, for a new deployment
//	idkeeper server          run the registry server (REST API, cleanup job, metrics)
//	idkeeper gateway         run the ID gateway: batches of IDs over HTTP
//	idkeeper apikey create   create an API key and print it once
//	idkeeper apikey list     list the API keys: use, quota, node IDs held
//	idkeeper apikey revoke   revoke an API key
//	idkeeper users …         manage the admin web's accounts: list, add, disable, enable, set-role, reset-password
//	idkeeper audit verify    check the audit log's hash chain
//	idkeeper audit list      print the newest audit entries
//	idkeeper backup export   write the store's whole state to a backup file
//	idkeeper backup import   replace the store's state with a backup, safely
//	idkeeper clock-agent     serve NTP or kernel-disciplined time over TCKCLK 2 for the servers' clock check
//	idkeeper probe URL       health check for containers (distroless has no shell or curl)
//	idkeeper decode ID…      print an ID's time, node ID and sequence; --origin: its lease
//	idkeeper version         print the version
//
// Every flag can also be set in the environment as IDKEEPER_<FLAG>, upper case with
// "-" as "_" (--lease-duration: IDKEEPER_LEASE_DURATION); a flag on the command line
// wins over the environment. Exit status: 0 on success, 1 when the command failed,
// 2 for a usage or configuration error (an unknown flag, a setting out of range),
// 75 (EX_TEMPFAIL) for a server whose clock check failed while it served: its
// supervisor must start a fresh process (docs/clock.md).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/idkeeper/idkeeper/server"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		// The first signal starts a graceful shutdown; restoring the default handlers
		// lets a second one end the process at once.
		stop()
	}()
	code := run(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses of run.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
	// exitClockUnverified is the server's after a failed clock check: its
	// supervisor must start a fresh process (server.ExitClockUnverified).
	exitClockUnverified = server.ExitClockUnverified
)

// lookupEnv reads one environment variable; os.LookupEnv in production, a map in
// tests.
type lookupEnv func(string) (string, bool)

// usageError is a mistake in the command line or configuration: run prints it and
// exits with status 2, as for a *server.ConfigError.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// subcommand picks the subcommand of command (one of subs) from args. For -h,
// --help or help it prints usage on stdout and reports done; for a missing or
// unknown one it prints usage on stderr and returns a usage error naming subs.
// Otherwise it returns the subcommand and the arguments after it.
func subcommand(command, usage string, subs []string, args []string, stdout, stderr io.Writer) (sub string, rest []string, done bool, err error) {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprint(stdout, usage)
		return "", nil, true, nil
	}
	if len(args) > 0 && slices.Contains(subs, args[0]) {
		return args[0], args[1:], false, nil
	}
	fmt.Fprint(stderr, usage)
	list := subs[len(subs)-1]
	if len(subs) > 1 {
		list = strings.Join(subs[:len(subs)-1], ", ") + " or " + list
	}
	return "", nil, false, usagef("%s: want the subcommand %s", command, list)
}

const usage = `Usage: idkeeper <command> [flags]

Commands:
  dev             run everything locally on the embedded store (prints the URLs and an API key)
  init            initialise an empty store once, for a new deployment
  server          run the registry server
  gateway         run the ID gateway (POST /v1/ids) against a registry server
  apikey create   create an API key and print it once
  apikey list     list the API keys: last use, quota, node IDs held
  apikey revoke   revoke an API key
  users …         manage the admin web's accounts (list, add, disable, enable, set-role, reset-password)
  audit verify    check the audit log's hash chain; audit list prints its newest entries
  backup export   write the store's whole state to a backup file (offline)
  backup import   replace the store's state with a backup file, quarantined safely (offline)
  clock-agent     serve NTP or the kernel's disciplined time over TCKCLK 2: the clock agent servers check their clocks against
  probe URL       health check for containers: GET an http(s) URL (2xx: exit 0) or connect to tcp://HOST:PORT
  decode ID…      print an ID's time, node ID and sequence (offline); --origin: the lease that minted it
  bench           drive a running gateway: IDs per second and latency percentiles at a concurrency and batch size
  version         print the version

Run "idkeeper <command> -h" for the flags of a command. Every flag can also be
set in the environment as IDKEEPER_<FLAG> (upper case, "-" as "_").
`

// run executes one command line and returns the process's exit status. ctx ends
// when the process is told to stop (SIGINT, SIGTERM).
func run(ctx context.Context, args []string, env lookupEnv, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "dev":
		err = runDev(ctx, rest, env, stdout, stderr)
	case "init":
		err = runInit(ctx, rest, env, stdout, stderr)
	case "server":
		err = runServer(ctx, rest, env, stderr)
	case "gateway":
		err = runGateway(ctx, rest, env, stderr)
	case "apikey":
		err = runAPIKey(ctx, rest, env, stdout, stderr)
	case "users":
		err = runUsers(ctx, rest, env, stdout, stderr)
	case "audit":
		err = runAudit(ctx, rest, env, stdout, stderr)
	case "backup":
		err = runBackup(ctx, rest, env, stdout, stderr)
	case "clock-agent":
		err = runClockAgent(ctx, rest, env, stderr)
	case "probe":
		err = runProbe(ctx, rest, stdout, stderr)
	case "decode":
		err = runDecode(ctx, rest, env, stdout, stderr)
	case "bench":
		err = runBench(ctx, rest, env, stdout, stderr)
	case "version", "--version", "-version":
		v, c := buildVersion()
		fmt.Fprintf(stdout, "idkeeper %s (commit %s, %s)\n", v, c, goVersion())
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "idkeeper: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errHelp):
		return exitOK
	case errors.As(err, new(*server.ClockLatchedError)):
		// The server logged why, in one line, before it shut down.
		return exitClockUnverified
	case errors.As(err, new(usageError)), errors.As(err, new(*server.ConfigError)):
		fmt.Fprintf(stderr, "idkeeper: %v\n", err)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "idkeeper: %v\n", err)
		return exitFail
	}
}
