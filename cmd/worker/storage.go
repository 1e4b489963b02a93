package main

import (
	"context"
	"log/slog"
)

// slowStorageDriver is the engine storage driver whose daemon does a
// sandbox's filesystem work outside the sandbox.
const slowStorageDriver = "fuse-overlayfs"

// storageDriverer is what the start-up check asks of the executor.
type storageDriverer interface {
	StorageDriver(ctx context.Context) (string, error)
}

// logStorageDriver logs the engine's storage driver once at start-up, as
// a warning when it is fuse-overlayfs: each container's root filesystem
// is then served by a fuse-overlayfs daemon that runs as root on the host,
// outside the container's cgroup, so a job that storms its read-only root
// with stats and opens spends host CPU beyond its cpus limit (about half
// a CPU more, measured). overlay2 does that work in the kernel, charged
// to the job. An engine that does not answer is the health check's to
// report; here it costs only the line.
func logStorageDriver(ctx context.Context, log *slog.Logger, e storageDriverer) {
	driver, err := e.StorageDriver(ctx)
	switch {
	case err != nil:
		log.Debug("the engine's storage driver is unknown", "error", err)
	case driver == slowStorageDriver:
		log.Warn("the engine's storage driver is fuse-overlayfs: a job can make its daemon, outside the sandbox's cgroup, "+
			"spend host CPU beyond the job's cpus limit; use overlay2 in production", "storage_driver", driver)
	default:
		log.Info("the engine's storage driver", "storage_driver", driver)
	}
}
