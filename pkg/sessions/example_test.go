package sessions_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// A session across calls: a cell's globals are there for the next, and a
// command reads what a cell wrote.
func Example() {
	nc, err := nats.Connect(os.Getenv("NATS_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	c, err := sessions.NewClient(ctx, js, "")
	if err != nil {
		log.Fatal(err)
	}
	s, err := c.Create(ctx, sessions.Spec{Image: "python"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Delete(ctx, s.ID)
	if _, err := c.RunCode(ctx, s.ID, "", sessions.CodeRequest{Code: "rows = [1, 2, 3]\nopen('n.txt', 'w').write(str(len(rows)))"}); err != nil {
		log.Fatal(err)
	}
	r, err := c.RunCode(ctx, s.ID, "", sessions.CodeRequest{Code: "sum(rows)"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Text)
	out, err := c.Exec(ctx, s.ID, "", sessions.ExecRequest{Shell: "cat n.txt"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out.Stdout, *out.ExitCode)
}
