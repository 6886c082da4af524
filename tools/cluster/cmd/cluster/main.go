// Command cluster runs a Temporal server on Postgres until SIGINT or
// SIGTERM (`make cluster`): the persistence and visibility databases on the
// local Postgres, the server's schemas, its four services in separate
// processes (or one with -one), and the namespace.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/effectively/effectively/tools/cluster"
)

func main() {
	dir := flag.String("dir", ".cluster", "configuration and logs")
	one := flag.Bool("one", false, "run the four services in one process")
	fresh := flag.Bool("fresh", false, "drop the databases first")
	db := flag.String("database", "temporal_effectively", "persistence database (visibility: <name>_visibility)")
	ns := flag.String("namespace", "default", "namespace to register")
	retention := flag.Duration("retention", 24*time.Hour, "the namespace's retention")
	flag.Parse()
	abs, err := filepath.Abs(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := cluster.Start(ctx, cluster.Options{Dir: abs, Split: !*one, Fresh: *fresh, Database: *db, Namespace: *ns, Retention: *retention})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("Temporal server %s on Postgres: frontend %s, namespace %s (retention %s)\n", cluster.ServerVersion, c.Address(), c.Namespace(), *retention)
	for n, pid := range c.Pids() {
		fmt.Printf("  %-8s pid %d, metrics http://%s/metrics\n", n, pid, c.Metrics()[n])
	}
	fmt.Printf("logs in %s; next: TEMPORAL_ADDRESS=%s TEMPORAL_NAMESPACE=%s worker setup\n", abs, c.Address(), c.Namespace())
	<-ctx.Done()
	c.Stop()
}
