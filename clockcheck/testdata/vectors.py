# Derives the TCKCLK 2 golden vectors in vectors.json from DESIGN §8 alone, with
# Python's standard library (no Go code involved):
#
#   python3 testdata/vectors.py > testdata/vectors.json
import hmac, hashlib, struct, base64, json
def b64(b): return base64.urlsafe_b64encode(b).rstrip(b'=').decode()
cases = [
  ("basic", b"0123456789abcdefghijklmnopqrstuv", bytes(range(16)), 1767225600123, 12, 1, 3456),
  ("unsynced-zeros", bytes([0xa5])*48, bytes([0xff])*16, 0, 0, 0, 0),
  ("max-values", hashlib.sha256(b"tckclk golden").digest(), bytes.fromhex("fb0f3ce2b8d1e6a7000102f0e1d2c3b4"), 2**64-1, 2**64-1, 1, 2**64-1),
]
out = []
for name, secret, nonce, ref, unc, synced, age in cases:
    m = b"TCKCLK\x00" + struct.pack(">H", 2) + nonce + struct.pack(">QQBQ", ref, unc, synced, age)
    mac = hmac.new(secret, m, hashlib.sha256).digest()
    req = "TCKCLK 2 %s\n" % b64(nonce)
    resp = "TCKCLK 2 %s %d %d %d %d %s\n" % (b64(nonce), ref, unc, synced, age, b64(mac))
    out.append(dict(name=name, secret_hex=secret.hex(), nonce_hex=nonce.hex(), reference_unix_ms=str(ref),
        uncertainty_ms=str(unc), synced=bool(synced), source_age_ms=str(age), mac_input_hex=m.hex(),
        mac_hex=mac.hex(), request_line=req, response_line=resp))
print(json.dumps(out, indent=2))
