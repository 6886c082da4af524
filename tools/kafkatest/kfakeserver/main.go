// Command kfakeserver runs franz-go's kfake, an in-memory Kafka, as a
// separate process: one broker on one loopback port that persists its log,
// offsets and groups in -data-dir (fsynced on every write with -sync), so a
// test can SIGKILL it and start it again on the same port and data. It is
// test and development tooling (make run with a Kafka source), not a Kafka
// to run anything on.
//
// It prints "kfake listening on ADDR" once it accepts connections and
// stops on SIGINT or SIGTERM.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	port := flag.Int("port", 9092, "loopback port to listen on")
	dataDir := flag.String("data-dir", "", "directory to persist state in (empty: memory only)")
	syncWrites := flag.Bool("sync", false, "fsync every write, so a SIGKILL loses nothing acknowledged")
	topics := flag.String("topics", "", "comma-separated topics to create (with -partitions partitions) if missing")
	partitions := flag.Int("partitions", 3, "partitions of each topic in -topics")
	autoCreate := flag.Bool("auto-create", false, "create a topic a client asks for (the outbox relay's event topics)")
	flag.Parse()

	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(*port)}
	if *dataDir != "" {
		opts = append(opts, kfake.DataDir(*dataDir))
	}
	if *autoCreate {
		opts = append(opts, kfake.AllowAutoTopicCreation())
	}
	if *syncWrites {
		opts = append(opts, kfake.SyncWrites())
	}
	if *topics != "" {
		opts = append(opts, kfake.SeedTopics(int32(*partitions), strings.Split(*topics, ",")...)) //nolint:gosec // a flag, small
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kfakeserver: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("kfake listening on %s\n", strings.Join(c.ListenAddrs(), ","))

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	<-sigs
	c.Close() // writes the state out
}
