package clockcheck

import (
	"bytes"
	"fmt"
	"os"
)

// ReadSecretFile reads the TCKCLK secret from the file at path: its content
// without trailing CR and LF bytes, used as is (a text secret such as the output
// of `openssl rand -base64 48` is used as those ASCII bytes, not decoded). It
// returns an error for a file it cannot read or a secret under MinSecretLen
// bytes. warning is non-empty when the file is readable by its group or by
// others: the caller logs it; the secret is still returned.
func ReadSecretFile(path string) (secret []byte, warning string, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	secret = bytes.TrimRight(b, "\r\n")
	if err := checkSecret(secret); err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		warning = fmt.Sprintf("the clock secret file %s is readable by its group or others (mode %04o); chmod 600 it", path, fi.Mode().Perm())
	}
	return secret, warning, nil
}
