package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"slices"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// Submit a job and wait for its result. The watch on the result is opened
// before the job is published, so that a fast result is not missed.
func ExampleClient_SubmitAndWait() {
	url, stop := startFleet() // your fleet's NATS URL instead
	defer stop()

	nc, err := nats.Connect(url)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	client, err := jobs.NewClient(ctx, js, jobs.Config{})
	if err != nil {
		log.Fatal(err)
	}
	res, err := client.SubmitAndWait(ctx, &jobs.Job{Image: "python", Code: "print hello"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s, exit %d: %s", res.Status, *res.Exit, res.Stdout)
	// Output: succeeded, exit 0: hello
}

// Follow a job's events as they come: its lifecycle, its output as it is
// written, and last its result.
func ExampleClient_Follow() {
	url, stop := startFleet()
	defer stop()
	client := connect(url)

	ctx := context.Background()
	id, err := client.Submit(ctx, &jobs.Job{Image: "python", Code: "print one\nprint two"})
	if err != nil {
		log.Fatal(err)
	}
	var stdout []byte
	for ev, err := range client.Follow(ctx, id) {
		if err != nil {
			log.Fatal(err)
		}
		switch ev.Type {
		case jobs.EventOutput:
			// The output as the worker published it: in pieces whose
			// bounds depend on timing.
			if ev.Stream == jobs.Stdout {
				stdout = append(stdout, ev.DataBytes()...)
			}
		case jobs.EventFinished:
			fmt.Printf("%s, %s", ev.Result.Status, stdout)
		default:
			fmt.Println(ev.Type) // queued, started, and any redelivered
		}
	}
	// Output:
	// queued
	// started
	// succeeded, one
	// two
}

// A workspace keeps a job's working directory for the next job that names
// it: each job restores its latest revision and saves the next.
func ExampleClient_Workspace() {
	url, stop := startFleet()
	defer stop()
	client := connect(url)

	ctx := context.Background()
	for _, code := range []string{"write notes.txt first step", "cat notes.txt"} {
		res, err := client.SubmitAndWait(ctx, &jobs.Job{Image: "python", Workspace: "agent-7", Code: code})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s, revision %d: %q\n", res.Status, res.Workspace.Revision, res.Stdout)
	}
	head, err := client.Workspace(ctx, "agent-7")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(head.Name, "at revision", head.Revision)
	// Output:
	// succeeded, revision 1: ""
	// succeeded, revision 2: "first step\n"
	// agent-7 at revision 2
}

// A batch: one watch of the batch's results, opened before its jobs are
// published, costs the server one consumer instead of one per job.
func ExampleClient_WatchResults() {
	url, stop := startFleet()
	defer stop()
	client := connect(url)

	ctx := context.Background()
	ids := []string{"case-1", "case-2", "case-3"}
	watch, err := client.WatchResults(ctx, ids...)
	if err != nil {
		log.Fatal(err)
	}
	defer watch.Stop()
	for _, id := range ids {
		if _, err := client.Submit(ctx, &jobs.Job{ID: id, Image: "python", Code: "print " + id}); err != nil {
			log.Fatal(err)
		}
	}
	var done []string
	for len(done) < len(ids) {
		stored, err := watch.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		res, err := stored.Decode()
		if err != nil {
			log.Fatal(err)
		}
		done = append(done, fmt.Sprintf("%s %s: %s", res.ID, res.Status, res.Stdout))
	}
	slices.Sort(done) // results come in the order the jobs finish
	for _, d := range done {
		fmt.Print(d)
	}
	// Output:
	// case-1 succeeded: case-1
	// case-2 succeeded: case-2
	// case-3 succeeded: case-3
}

// Cancel a job that may have finished already: the error says so, with
// the result it reached.
func ExampleClient_Cancel() {
	url, stop := startFleet()
	defer stop()
	client := connect(url)

	ctx := context.Background()
	res, err := client.SubmitAndWait(ctx, &jobs.Job{Image: "python", Code: "print done"})
	if err != nil {
		log.Fatal(err)
	}
	_, err = client.Cancel(ctx, res.ID)
	if finished := (*jobs.FinishedError)(nil); errors.As(err, &finished) {
		fmt.Println("finished before the cancel:", finished.Result.Status)
	} else if err != nil {
		log.Fatal(err)
	}
	// Output: finished before the cancel: succeeded
}

// connect is the start of ExampleClient_SubmitAndWait: a client of the
// fleet at url.
func connect(url string) *jobs.Client {
	nc, err := nats.Connect(url)
	if err != nil {
		log.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	client, err := jobs.NewClient(context.Background(), js, jobs.Config{})
	if err != nil {
		log.Fatal(err)
	}
	return client
}
