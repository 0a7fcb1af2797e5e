package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idkeeper/idkeeper"
)

// skewRecord is the JSON of one observation.
type skewRecord struct {
	Requester  string             `json:"requester"` // requester key
	Skew       time.Duration      `json:"skew"`
	Threshold  time.Duration      `json:"threshold"`
	Level      idkeeper.SkewLevel `json:"level"`
	ObservedAt time.Time          `json:"observedAt"`
	RemoteIP   string             `json:"remoteIp,omitempty"`
	Operation  string             `json:"operation,omitempty"`
}

// RecordSkew replaces the requester's observation; it lapses ttl after the
// store's now. Redis also expires the key by itself (PEXPIRE), so lapsed
// observations cost no memory even when nobody lists them.
func (s *Store) RecordSkew(ctx context.Context, o idkeeper.SkewObservation, ttl time.Duration) error {
	key := o.Requester.Key()
	b, err := json.Marshal(skewRecord{Requester: key, Skew: o.Skew, Threshold: o.Threshold, Level: o.Level,
		ObservedAt: o.ObservedAt.UTC(), RemoteIP: o.RemoteIP, Operation: o.Operation})
	if err != nil {
		return fmt.Errorf("redis: skew: %w", err)
	}
	_, err = s.run(ctx, scriptSkewRecord, []string{s.keys.skewIndex, s.keys.skew(key)}, false,
		s.nowArg(), key, b, ttl.Milliseconds())
	if err != nil {
		return wrap("record skew", err)
	}
	return nil
}

// SkewObservations returns the observations that have not lapsed at the store's
// now, sorted by requester key, and drops the lapsed ones.
func (s *Store) SkewObservations(ctx context.Context) ([]idkeeper.SkewObservation, error) {
	now, err := s.Now(ctx)
	if err != nil {
		return nil, err
	}
	nowMs := strconv.FormatInt(now.UnixMilli(), 10)
	lapsed, err := s.client.ZRangeByScore(ctx, s.keys.skewIndex, &goredis.ZRangeBy{Min: "-inf", Max: nowMs}).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: skew observations: %w", err)
	}
	if len(lapsed) > 0 {
		keys := []string{s.keys.skewIndex}
		args := []any{nowMs}
		for _, m := range lapsed {
			keys = append(keys, s.keys.skew(m))
			args = append(args, m)
		}
		if _, err := s.run(ctx, scriptSkewDrop, keys, false, args...); err != nil {
			return nil, wrap("drop lapsed skew", err)
		}
	}
	live, err := s.client.ZRangeByScore(ctx, s.keys.skewIndex, &goredis.ZRangeBy{Min: "(" + nowMs, Max: "+inf"}).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: skew observations: %w", err)
	}
	out := []idkeeper.SkewObservation{}
	if len(live) == 0 {
		return out, nil
	}
	// The index is ordered by lapse time; the answer goes by requester key.
	slices.Sort(live)
	keys := make([]string, len(live))
	for i, m := range live {
		keys[i] = s.keys.skew(m)
	}
	vals, err := s.client.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: skew observations: %w", err)
	}
	for i, v := range vals {
		str, ok := v.(string)
		if !ok {
			continue // expired by Redis already
		}
		o, err := decodeSkew(live[i], str)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

func decodeSkew(member, v string) (idkeeper.SkewObservation, error) {
	var r skewRecord
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return idkeeper.SkewObservation{}, fmt.Errorf("redis: malformed skew observation of %q: %w", member, err)
	}
	req, err := idkeeper.ParseRequesterKey(r.Requester)
	if err != nil {
		return idkeeper.SkewObservation{}, fmt.Errorf("redis: skew observation of %q: %w", member, err)
	}
	return idkeeper.SkewObservation{Requester: req, Skew: r.Skew, Threshold: r.Threshold, Level: r.Level,
		ObservedAt: r.ObservedAt.UTC(), RemoteIP: r.RemoteIP, Operation: r.Operation}, nil
}
