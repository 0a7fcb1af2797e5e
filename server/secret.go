package server

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/idkeeper/idkeeper"
)

// receiptSecret returns the receipt secret (DESIGN §7) from the environment, else
// from file when set, else from generatedPath, creating it there (mode 0600, 32
// random bytes as base64url) on first use; generated tells the last case. A
// secret must be at least idkeeper.MinReceiptSecretLen bytes; a trailing newline
// is not part of it.
func receiptSecret(env func(string) (string, bool), file, generatedPath string) (secret []byte, source string, generated bool, err error) {
	if v, ok := env(ReceiptSecretEnv); ok && v != "" && file != "" {
		return nil, "", false, configErrorf("set %s or --receipt-secret-file (%s_FILE), not both", ReceiptSecretEnv, ReceiptSecretEnv)
	} else if ok && v != "" {
		secret, source = []byte(v), ReceiptSecretEnv
	} else if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, "", false, fmt.Errorf("read the receipt secret: %w", err)
		}
		secret, source = bytes.TrimRight(b, "\r\n"), file
	} else {
		secret, generated, err = generatedSecret(generatedPath)
		if err != nil {
			return nil, "", false, err
		}
		source = generatedPath
	}
	if len(secret) < idkeeper.MinReceiptSecretLen {
		return nil, "", false, configErrorf("the receipt secret from %s is %d bytes long; it must be at least %d",
			source, len(secret), idkeeper.MinReceiptSecretLen)
	}
	return secret, source, generated, nil
}

// generatedSecret reads the secret kept at path, or makes one and keeps it there.
func generatedSecret(path string) ([]byte, bool, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		return bytes.TrimRight(b, "\r\n"), false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, fmt.Errorf("read the receipt secret: %w", err)
	}
	var raw [32]byte
	_, _ = rand.Read(raw[:])
	secret := base64.RawURLEncoding.EncodeToString(raw[:])
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, false, fmt.Errorf("create the directory of the receipt secret: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("save the receipt secret: %w", err)
	}
	_, werr := f.WriteString(secret + "\n")
	serr := f.Sync()
	if err := errors.Join(werr, serr, f.Close()); err != nil {
		return nil, false, fmt.Errorf("save the receipt secret: %w", err)
	}
	return []byte(secret), true, nil
}

// logReceiptSecret says where the receipt secret came from; never the secret.
func logReceiptSecret(log *slog.Logger, store, source string, generated bool) {
	shared := !strings.HasPrefix(store, "bolt:")
	switch {
	case generated && shared:
		log.Warn("generated a receipt secret for this replica; every replica sharing the store must use the same one "+
			"(set "+ReceiptSecretEnv+" or --receipt-secret-file on all), or holders keep their leases over a store "+
			"reset only when they renew through the replica that signed their receipts", "file", source)
	case generated:
		log.Info("generated a receipt secret", "file", source)
	default:
		log.Info("receipt secret loaded", "from", source)
	}
}
