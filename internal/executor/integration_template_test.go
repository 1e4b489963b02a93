package executor

// Template images (sandbox-image/build.sh template): an operator's
// Dockerfile FROM a sandfleet base, built offline and checked to keep the
// launcher, the sandbox user and the hardening. The base is
// SANDFLEET_TEST_IMAGE when set, else DefaultImage.

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// buildTemplate writes dockerfile (with "BASE" standing for the base image)
// and files into a fresh context and runs build.sh template on it for tag.
// It returns build.sh's standard output and error, and its error.
func buildTemplate(t *testing.T, cli *client.Client, tag, dockerfile string, files map[string]string) (stdout, stderr string, err error) {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return buildTemplateIn(t, cli, tag, dir, dockerfile)
}

// buildTemplateIn is buildTemplate on the context dir as it is.
func buildTemplateIn(t *testing.T, cli *client.Client, tag, dir, dockerfile string) (stdout, stderr string, err error) {
	t.Helper()
	base := os.Getenv("SANDFLEET_TEST_IMAGE")
	if base == "" {
		base = DefaultImage
	}
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(strings.ReplaceAll(dockerfile, "BASE", base)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := cli.ImageRemove(ctx, tag, client.ImageRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Logf("removing %s: %v", tag, err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "../../sandbox-image/build.sh", "template", filepath.Join(dir, "Dockerfile"), tag)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// A template built FROM the sandbox image runs jobs through a preset like
// any other image: the files it bakes in are there, its RUN steps had no
// network (only the loopback interface), the job runs as a sandbox
// user, not root, and the result records the image ID build.sh printed.
func TestIntegrationTemplateImage(t *testing.T) {
	t.Parallel()
	cli := requireDocker(t)
	tag := "sandfleet/template-test:" + randHex(4)
	out, stderr, err := buildTemplate(t, cli, tag, `FROM BASE
COPY answer.txt /opt/task/answer.txt
USER 0
RUN ls /sys/class/net > /opt/task/net
USER 10001:10001
`, map[string]string{"answer.txt": "baked in\n"})
	if err != nil {
		t.Fatalf("build.sh template: %v\n%s", err, stderr)
	}
	id := strings.TrimSpace(out)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := cli.ImageInspect(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	if info.ID != id {
		t.Errorf("build.sh printed %q, the image is %s", id, info.ID)
	}
	if got := info.Config.Labels["sandfleet.template"]; got != tag {
		t.Errorf("label sandfleet.template = %q, want %q", got, tag)
	}
	// The sandbox's label stays, so that a tenant's template may run on
	// an operator's template of this image (tenantImage, templateRef).
	if info.Config.Labels[SandboxLabel] == "" {
		t.Errorf("the template image lost its base's %s label: %v", SandboxLabel, info.Config.Labels)
	}

	e := setup(t, func(c *Config) {
		c.Presets = map[string]Preset{"task": {Image: tag, MainFile: "main.sh", Argv: []string{"bash", "main.sh"}}}
	})
	res := run(t, e, job("cat /opt/task/answer.txt /opt/task/net; id -u", func(j *jobs.Job) { j.Image = "task" }))
	want(t, res, jobs.StatusSucceeded)
	if !strings.HasPrefix(res.Stdout, "baked in\nlo\n") || strings.HasSuffix(res.Stdout, "\n0\n") {
		t.Errorf("stdout = %q, want the baked file, only lo, and a uid other than root's", res.Stdout)
	}
	if res.ImageDigest != id {
		t.Errorf("image_digest = %q, want %s", res.ImageDigest, id)
	}
}

// build.sh template refuses an image that would lose the base's launcher,
// user or hardening, or that does not start FROM a sandfleet base, saying
// why, and never gives such an image the tag.
func TestIntegrationTemplateRefused(t *testing.T) {
	t.Parallel()
	cli := requireDocker(t)
	for _, tc := range []struct {
		name, dockerfile, why string
		files                 map[string]string
	}{
		{"not a sandfleet base", "FROM scratch\nCOPY x /x\n", "not a local image", nil},
		{"root user", "FROM BASE\nUSER 0\n", "changes the base's User", nil},
		{"own entrypoint", "FROM BASE\nENTRYPOINT [\"/bin/sh\"]\n", "changes the base's Entrypoint", nil},
		{"a volume", "FROM BASE\nVOLUME /data\n", "changes the base's Volumes", nil},
		{"launcher replaced", "FROM BASE\nUSER 0\nRUN cp /bin/true /usr/local/bin/sandfleet-launcher\nUSER 10001:10001\n", "changes /usr/local/bin/sandfleet-launcher", nil},
		{"setuid file", "FROM BASE\nUSER 0\nRUN chmod u+s /usr/bin/env\nUSER 10001:10001\n", "setuid or setgid files: /usr/bin/env", nil},
		{"base through a variable", "ARG B=BASE\nFROM ${B}\n", "SANDBOX_TEMPLATE_BASE", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tag := "sandfleet/template-test:" + randHex(4)
			files := map[string]string{"x": "x"}
			_, stderr, err := buildTemplate(t, cli, tag, tc.dockerfile, files)
			if err == nil {
				t.Fatalf("build.sh template built it; stderr:\n%s", stderr)
			}
			if !strings.Contains(stderr, "refused: ") || !strings.Contains(stderr, tc.why) {
				t.Errorf("stderr does not say %q:\n%s", tc.why, stderr)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := cli.ImageInspect(ctx, tag); !cerrdefs.IsNotFound(err) {
				t.Errorf("the refused image has the tag %s (inspect: %v)", tag, err)
			}
		})
	}
}
