package main

import (
	"fmt"
	"io"
)

// envSetting is a setting a command reads from the environment only, with no
// flag of its own: a secret a flag would show in ps, or a variable of Go or
// OpenTelemetry. Its command's -h lists it (printEnvOnly).
type envSetting struct {
	names string // the variables, as the help shows them
	what  string // what it sets
}

// The settings of envOnlySettings (docs/operations.md, "Settings only in the
// environment").
var (
	envBootstrapKey = envSetting{BootstrapKeyEnv + ", " + BootstrapKeyEnv + "_FILE",
		"an API key (at least 24 characters) stored at start, and after a store reset, when absent; a new value retires the previous one; _FILE: a file holding it"}
	envAdminKey = envSetting{AdminKeyEnv + ", " + AdminKeyEnv + "_FILE",
		"an admin API key (for /admin/api/) stored like the bootstrap key; not the bootstrap key's value; _FILE: a file holding it"}
	envAdminPassword = envSetting{AdminPasswordEnv + ", " + AdminPasswordEnv + "_FILE",
		"the first admin's password (12-1024 bytes), used only while the store holds no account; _FILE: a file holding it"}
	envReceiptSecret = envSetting{ReceiptSecretEnv,
		"the receipt secret (at least 32 bytes, the same on every replica), instead of --receipt-secret-file"}
	envClockSecret = envSetting{ClockSecretEnv,
		"the clock agent's secret (at least 32 bytes), instead of --clock-secret-file"}
	envConsumerKeys = envSetting{ConsumerKeysEnv,
		"consumer keys, comma- or newline-separated (SHA-256 hex or the keys), added to those of --consumer-keys-file"}
	envGOGC = envSetting{"GOGC",
		"Go's garbage collector target; when set it wins over --gc-percent"}
	envOTel = envSetting{"OTEL_* (OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SDK_DISABLED, …)",
		"OpenTelemetry tracing, off unless an exporter or endpoint is set (docs/operations.md, Tracing)"}
)

// envOnlySettings are the environment-only settings of each command, by the name
// its FlagSet has (newFlagSet).
var envOnlySettings = map[string][]envSetting{
	"server":  {envBootstrapKey, envAdminKey, envAdminPassword, envReceiptSecret, envClockSecret, envOTel},
	"dev":     {envBootstrapKey, envAdminPassword, envReceiptSecret, envGOGC, envOTel},
	"gateway": {envConsumerKeys, envGOGC, envOTel},
}

// printEnvOnly writes the environment-only settings of command, if any, after its
// flag table.
func printEnvOnly(w io.Writer, command string) {
	settings := envOnlySettings[command]
	if len(settings) == 0 {
		return
	}
	fmt.Fprintln(w, "\nSettings only in the environment (no flag):")
	for _, s := range settings {
		fmt.Fprintf(w, "  %s\n    \t%s\n", s.names, s.what)
	}
}
