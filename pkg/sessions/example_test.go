package sessions_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/pkg/sessionapi"
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
	if _, err := c.RunCode(ctx, s.ID, "", sessionapi.CodeRequest{Code: "rows = [1, 2, 3]\nopen('n.txt', 'w').write(str(len(rows)))"}); err != nil {
		log.Fatal(err)
	}
	r, err := c.RunCode(ctx, s.ID, "", sessionapi.CodeRequest{Code: "sum(rows)"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Text)
	out, err := c.Exec(ctx, s.ID, "", sessionapi.ExecRequest{Shell: "cat n.txt"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out.Stdout, *out.ExitCode)
}

// What a session ran, as a person watching it would read it: each cell's
// code and its value or error, and the figures it showed.
func ExampleClient_Cells() {
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
	id := os.Getenv("SESSION_ID")
	h, err := c.Cells(ctx, id)
	if err != nil {
		log.Fatal(err) // ErrGone: its worker keeps none (paused, lost, ended long ago)
	}
	if h.Dropped > 0 {
		fmt.Printf("(%d earlier cells no longer kept)\n", h.Dropped)
	}
	for _, cell := range h.Cells {
		fmt.Printf("[%d] %s\n", cell.Seq, cell.Code)
		if cell.Error != nil {
			fmt.Printf("  ! %s: %s\n", cell.Error.Name, cell.Error.Value)
		} else if cell.Text != "" {
			fmt.Printf("  = %s\n", cell.Text)
		}
		for _, d := range cell.Display {
			fmt.Printf("  [%s %dx%d]\n", d.MIME, d.Width, d.Height)
		}
	}
}
