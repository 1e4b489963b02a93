package fleet_test

import (
	"bytes"
	"errors"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
)

// streamConfigs returns the configuration of every stream on the server.
func streamConfigs(t *testing.T, js jetstream.JetStream) map[string]jetstream.StreamConfig {
	t.Helper()
	out := map[string]jetstream.StreamConfig{}
	l := js.ListStreams(t.Context())
	for info := range l.Info() {
		out[info.Config.Name] = info.Config
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Every stream the topology makes, each tenant's object stores included,
// has a cap of its own: none can take the storage of another, and the
// buckets tenants write also cap their keys and the size of a value.
func TestEveryStoreHasItsCaps(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	topo := fleet.Topology{}
	if _, err := topo.Ensure(t.Context(), js); err != nil {
		t.Fatal(err)
	}
	if _, err := topo.EnsureObjects(t.Context(), js, "team-a"); err != nil {
		t.Fatal(err)
	}
	checkCaps(t, js, topo)
}

// checkCaps checks the caps of every stream on the server against topo.
func checkCaps(t *testing.T, js jetstream.JetStream, topo fleet.Topology) {
	t.Helper()
	d := topo.WithDefaults()
	want := map[string]struct {
		maxBytes, maxMsgs int64
		maxMsgSize        int32
		discard           jetstream.DiscardPolicy
	}{
		"JOBS":                 {d.MaxBytes, d.MaxMsgs, int32(d.MaxJobBytes + 64<<10), jetstream.DiscardNew},
		"EVENTS":               {d.EventsMaxBytes, -1, 1 << 20, jetstream.DiscardOld},
		"INDEX":                {d.IndexMaxBytes, -1, 128 << 10, jetstream.DiscardOld},
		"KV_RESULTS":           {d.ResultsMaxBytes, -1, -1, jetstream.DiscardOld},
		"KV_WORKERS":           {16 << 20, -1, 64 << 10, jetstream.DiscardOld},
		"KV_CANCELS":           {d.CancelsMaxBytes, d.CancelsMaxKeys, fleet.MaxCancelBytes, jetstream.DiscardOld},
		"KV_WORKSPACES":        {d.WorkspacesMaxBytes, d.WorkspacesMaxKeys, fleet.MaxHeadBytes, jetstream.DiscardNew},
		"OBJ_SNAPSHOTS":        {d.SnapshotsMaxBytes, -1, 1 << 20, jetstream.DiscardNew},
		"OBJ_ARTIFACTS":        {d.ArtifactsMaxBytes, -1, 1 << 20, jetstream.DiscardNew},
		"OBJ_SNAPSHOTS_team-a": {d.SnapshotsMaxBytes, -1, 1 << 20, jetstream.DiscardNew},
		"OBJ_ARTIFACTS_team-a": {d.ArtifactsMaxBytes, -1, 1 << 20, jetstream.DiscardNew},
	}
	got := streamConfigs(t, js)
	for name, sc := range got {
		w, ok := want[name]
		if !ok {
			t.Errorf("stream %s: not one the test knows the caps of", name)
			continue
		}
		if sc.MaxBytes != w.maxBytes || sc.MaxMsgs != w.maxMsgs || sc.MaxMsgSize != w.maxMsgSize || sc.Discard != w.discard {
			t.Errorf("stream %s: max bytes %d, msgs %d, msg size %d, discard %v; want %d %d %d %v",
				name, sc.MaxBytes, sc.MaxMsgs, sc.MaxMsgSize, sc.Discard, w.maxBytes, w.maxMsgs, w.maxMsgSize, w.discard)
		}
		if (name == "KV_CANCELS" || name == "KV_WORKSPACES") && sc.AllowRollup {
			t.Errorf("stream %s allows rollups", name)
		}
	}
	for name := range want {
		if _, ok := got[name]; !ok {
			t.Errorf("stream %s not made", name)
		}
	}
}

// A fleet set up before the caps (its buckets as nats.go makes them, with
// no cap) gets them at its workers' next Ensure, and keeps what its
// stores hold.
func TestCapsReachAnExistingFleet(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	ctx := t.Context()
	for _, b := range []string{"RESULTS", "WORKERS", "CANCELS", "WORKSPACES"} {
		if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b, Storage: jetstream.FileStorage}); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range []string{"SNAPSHOTS", "ARTIFACTS", "SNAPSHOTS_team-a", "ARTIFACTS_team-a"} {
		if _, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: b, Storage: jetstream.FileStorage}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"JOBS", "EVENTS", "INDEX"} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{map[string]string{"JOBS": "jobs.>", "EVENTS": "events.>", "INDEX": "index.>"}[name]},
			Retention: map[bool]jetstream.RetentionPolicy{true: jetstream.WorkQueuePolicy}[name == "JOBS"]}); err != nil {
			t.Fatal(err)
		}
	}
	kv, _ := js.KeyValue(ctx, "RESULTS")
	if _, err := kv.Put(ctx, "old", []byte(`{"id":"old","status":"succeeded"}`)); err != nil {
		t.Fatal(err)
	}
	obj, _ := js.ObjectStore(ctx, "SNAPSHOTS_team-a")
	if _, err := obj.PutBytes(ctx, "team-a.agent/1", []byte("tar")); err != nil {
		t.Fatal(err)
	}

	topo := fleet.Topology{}
	if _, err := topo.Ensure(ctx, js); err != nil {
		t.Fatal(err)
	}
	if _, err := topo.EnsureObjects(ctx, js, "team-a"); err != nil {
		t.Fatal(err)
	}
	checkCaps(t, js, topo)
	if e, err := kv.Get(ctx, "old"); err != nil || !bytes.Contains(e.Value(), []byte("old")) {
		t.Errorf("a result from before: %v", err)
	}
	if b, err := obj.GetBytes(ctx, "team-a.agent/1"); err != nil || string(b) != "tar" {
		t.Errorf("a snapshot from before: %q %v", b, err)
	}
}

// apiCode is the JetStream error code of err, 0 for none.
func apiCode(err error) jetstream.ErrorCode {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode
	}
	return 0
}

// The server refuses a value over a tenant-writable bucket's cap: a
// tenant can no longer store megabytes in CANCELS or WORKSPACES without a
// job. Past CANCELS's key cap the oldest requests go (a flood cannot
// refuse another tenant's request); past WORKSPACES's a new head is
// refused while those that exist are still written.
func TestTenantWritableBucketsRefuseWhatIsOverTheirCaps(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	ctx := t.Context()
	topo := fleet.Topology{CancelsMaxKeys: 10, WorkspacesMaxKeys: 10}
	st, err := topo.Ensure(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte{'x'}, 7<<20)
	for _, tc := range []struct {
		subject string
		size    int
	}{
		{"$KV.CANCELS.team-b.x", fleet.MaxCancelBytes + 1},
		{"$KV.CANCELS.team-b.x", len(big)},
		{"$KV.WORKSPACES.team-b.x", fleet.MaxHeadBytes + 1},
		{"$KV.WORKSPACES.team-b.x", len(big)},
	} {
		_, err := js.Publish(ctx, tc.subject, big[:tc.size])
		if apiCode(err) != jetstream.JSErrCodeStreamMessageExceedsMaximum {
			t.Errorf("%d bytes on %s: %v, want refused as over the maximum", tc.size, tc.subject, err)
		}
	}
	if _, err := js.Publish(ctx, "$KV.CANCELS.team-b.x", []byte(`{"requested_at":"2026-01-01T00:00:00Z"}`)); err != nil {
		t.Errorf("a request: %v", err)
	}

	for i := range 25 {
		if _, err := st.Cancels.Put(ctx, "team-b.f"+strconv.Itoa(i), []byte(`{}`)); err != nil {
			t.Fatalf("request %d past the key cap: %v", i, err)
		}
	}
	if _, err := st.Cancels.Put(ctx, "team-a.mine", []byte(`{}`)); err != nil {
		t.Fatalf("another tenant's request behind the flood: %v", err)
	}
	info, err := js.Stream(ctx, "KV_CANCELS")
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n > 10 {
		t.Errorf("CANCELS holds %d requests past its cap of 10", n)
	}
	if _, err := st.Cancels.Get(ctx, "team-a.mine"); err != nil {
		t.Errorf("the newest request: %v", err)
	}

	heads := st.Workspaces.Heads
	for i := range 10 {
		if _, err := heads.Create(ctx, "team-b.w"+strconv.Itoa(i), []byte(`{}`)); err != nil {
			t.Fatalf("head %d: %v", i, err)
		}
	}
	if _, err := heads.Create(ctx, "team-a.agent", []byte(`{}`)); !fleet.StoreFull(err) {
		t.Errorf("a head past the cap of 10: %v, want refused", err)
	}
	if _, err := heads.Put(ctx, "team-b.w3", []byte(`{"name":"team-b.w3"}`)); err != nil {
		t.Errorf("an update of a head that exists, at the cap: %v", err)
	}
	if _, err := heads.Get(ctx, "team-b.w0"); err != nil {
		t.Errorf("the oldest head, at the cap: %v", err)
	}
}
