package idkeeper

import (
	"context"
	"time"
)

// SkewLevelFor classifies skew = server now − client now against the grace period
// (DESIGN §3): above grace (the client is behind by more than the grace that covers
// it) is SkewReject, |skew| above grace/2 is SkewWarn. With grace 0 nothing is
// rejected; every skew above 0 warns.
func SkewLevelFor(skew, grace time.Duration) SkewLevel {
	switch {
	case grace > 0 && skew > grace:
		return SkewReject
	case skew.Abs() > grace/2:
		return SkewWarn
	}
	return SkewOK
}

// checkSkew measures, logs, records and judges one client clock reading. It returns a
// CLOCK_SKEW_TOO_LARGE Error for Alloc when the skew is rejected.
func (r *Registry) checkSkew(ctx context.Context, op string, who Requester, now, client time.Time, remoteIP string) error {
	grace := r.cfg.Grace
	skew := now.Sub(Millis(client))
	level := SkewLevelFor(skew, grace)
	r.obs.Skew(op, skew, level)
	if level == SkewOK {
		return nil
	}
	attrs := []any{"op", op, "requester", who.Key(), "skew", skew, "threshold", grace, "remoteIp", remoteIP}
	if level == SkewReject && op == "alloc" {
		r.log.Warn("clock skew too large: alloc rejected", attrs...)
	} else {
		r.log.Warn("clock skew", attrs...)
	}
	obs := SkewObservation{Requester: who, Skew: skew, Threshold: grace, Level: level, ObservedAt: now, RemoteIP: remoteIP, Operation: op}
	if err := r.store.RecordSkew(ctx, obs, r.cfg.LeaseDuration+grace); err != nil {
		r.log.Warn("record clock skew", "err", err)
	}
	if level != SkewReject || op != "alloc" {
		return nil
	}
	return &Error{
		Code: CodeClockSkewTooLarge,
		Message: "the client's clock is behind the server's by " + skew.String() +
			", more than the cleanup grace period of " + grace.String() + "; sync the client's clock with NTP",
		Details: map[string]any{
			"skewMs":      skew.Milliseconds(),
			"thresholdMs": grace.Milliseconds(),
			"action":      "sync the client's clock with NTP",
		},
	}
}
