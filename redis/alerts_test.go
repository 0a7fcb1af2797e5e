package redis_test

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/alert"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
	"github.com/idkeeper/idkeeper/internal/harness/storetest"
	"github.com/idkeeper/idkeeper/redis"
)

func TestAlertStore(t *testing.T) {
	srv := redistest.Start(t)
	storetest.RunAlerts(t, func(t *testing.T) alert.StateStore {
		return open(t, srv, redis.Options{})
	})
}

// On Redis Cluster the alert states stay in the slot of the store's hash tag.
func TestAlertStoreCluster(t *testing.T) {
	srv := redistest.Start(t, redistest.WithCluster())
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{srv.Addr()}})
	t.Cleanup(func() { c.Close() })
	storetest.RunAlerts(t, func(t *testing.T) alert.StateStore {
		return open(t, srv, redis.Options{Client: c})
	})
}

func TestBackupScheduleStore(t *testing.T) {
	srv := redistest.Start(t)
	storetest.RunBackupSchedule(t, func(t *testing.T) idkeeper.BackupScheduleStore {
		return open(t, srv, redis.Options{})
	})
}

// On Redis Cluster the schedule stays in the slot of the store's hash tag.
func TestBackupScheduleStoreCluster(t *testing.T) {
	srv := redistest.Start(t, redistest.WithCluster())
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{srv.Addr()}})
	t.Cleanup(func() { c.Close() })
	storetest.RunBackupSchedule(t, func(t *testing.T) idkeeper.BackupScheduleStore {
		return open(t, srv, redis.Options{Client: c})
	})
}
