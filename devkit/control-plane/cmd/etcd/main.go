// Command etcd runs a single-member etcd (go.etcd.io/etcd/server/v3/embed) for the
// test control plane: loopback URLs, a throwaway data directory, and one line on stdout
// once it serves clients:
//
//	etcd ready: client http://127.0.0.1:40123 peer http://127.0.0.1:40125 data /tmp/x
//
// giving the addresses actually bound (a URL with port 0 gets a free port). SIGTERM or
// SIGINT stops it cleanly (exit 0); exit 1 is a failure, 2 a usage error.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	os.Exit(run())
}

func run() int {
	var (
		dataDir      = flag.String("data-dir", "", "directory for the member's data (required)")
		name         = flag.String("name", "default", "member name")
		clientURL    = flag.String("client-url", "", "shorthand: listen on and advertise this one client URL")
		listenClient = flag.String("listen-client-urls", "http://127.0.0.1:2379", "comma-separated URLs to serve clients on")
		advertiseCl  = flag.String("advertise-client-urls", "", "comma-separated client URLs to advertise (default: the listen URLs)")
		listenPeer   = flag.String("listen-peer-urls", "http://127.0.0.1:0", "comma-separated URLs for peer traffic, also advertised (port 0: any free port, fine for a single member)")
		noFsync      = flag.Bool("unsafe-no-fsync", false, "skip fsync: faster, loses data on a crash (tests only)")
		logLevel     = flag.String("log-level", "info", "debug, info, warn or error")
		quotaBytes   = flag.Int64("quota-backend-bytes", 0, "backend size quota in bytes (0: etcd's default)")
		readyTimeout = flag.Duration("ready-timeout", 60*time.Second, "give up if not serving within this time")
		stopTimeout  = flag.Duration("stop-timeout", 10*time.Second, "after a stop signal, exit anyway after this time")
	)
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "etcd: unexpected arguments: %q\n", flag.Args())
		return 2
	}
	if *dataDir == "" {
		fmt.Fprintln(os.Stderr, "etcd: --data-dir is required")
		return 2
	}
	if *clientURL != "" {
		*listenClient = *clientURL
		*advertiseCl = *clientURL
	}
	if *advertiseCl == "" {
		*advertiseCl = *listenClient
	}

	cfg := embed.NewConfig()
	cfg.Name = *name
	cfg.Dir = *dataDir
	cfg.UnsafeNoFsync = *noFsync
	// embed.NewConfig leaves this at 0 (only etcd's own flag parsing sets the
	// default), and 0 logs every gRPC request as a slow-request warning: about
	// 17 lines a second from an idle API server.
	cfg.WarningUnaryRequestDuration = embed.DefaultWarningUnaryRequestDuration
	cfg.LogLevel = *logLevel
	if *quotaBytes > 0 {
		cfg.QuotaBackendBytes = *quotaBytes
	}
	var err error
	if cfg.ListenClientUrls, err = parseURLs("listen-client-urls", *listenClient); err != nil {
		return usageError(err)
	}
	if cfg.AdvertiseClientUrls, err = parseURLs("advertise-client-urls", *advertiseCl); err != nil {
		return usageError(err)
	}
	if cfg.ListenPeerUrls, err = parseURLs("listen-peer-urls", *listenPeer); err != nil {
		return usageError(err)
	}
	cfg.AdvertisePeerUrls = cfg.ListenPeerUrls
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)

	// Listen for signals before starting, so a stop during start-up is not lost.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd: cannot start: %v\n", err)
		return 1
	}

	select {
	case <-e.Server.ReadyNotify():
		// The addresses actually bound: with port 0 in a URL, this line is how the
		// caller learns the port.
		var clients, peers []string
		for _, l := range e.Clients {
			clients = append(clients, listenerURL(cfg.ListenClientUrls[0].Scheme, l.Addr()))
		}
		for _, l := range e.Peers {
			peers = append(peers, listenerURL(cfg.ListenPeerUrls[0].Scheme, l.Addr()))
		}
		fmt.Printf("etcd ready: client %s peer %s data %s\n",
			strings.Join(clients, ","), strings.Join(peers, ","), cfg.Dir)
	case err := <-e.Err():
		fmt.Fprintf(os.Stderr, "etcd: failed while starting: %v\n", err)
		e.Close()
		return 1
	case sig := <-signals:
		fmt.Fprintf(os.Stderr, "etcd: %v while starting; stopping\n", sig)
		return stop(e, *stopTimeout)
	case <-time.After(*readyTimeout):
		fmt.Fprintf(os.Stderr, "etcd: not ready after %v; stopping\n", *readyTimeout)
		stop(e, *stopTimeout)
		return 1
	}

	select {
	case sig := <-signals:
		fmt.Fprintf(os.Stderr, "etcd: %v; stopping\n", sig)
		return stop(e, *stopTimeout)
	case err, ok := <-e.Err():
		if ok && err != nil {
			fmt.Fprintf(os.Stderr, "etcd: %v\n", err)
		} else {
			fmt.Fprintln(os.Stderr, "etcd: server stopped")
		}
		e.Close()
		return 1
	}
}

// stop closes the server, giving up after timeout (a wedged close must not keep the
// process alive past its caller's patience).
func stop(e *embed.Etcd, timeout time.Duration) int {
	done := make(chan struct{})
	go func() {
		e.Close()
		close(done)
	}()
	select {
	case <-done:
		fmt.Fprintln(os.Stderr, "etcd: stopped")
		return 0
	case <-time.After(timeout):
		fmt.Fprintf(os.Stderr, "etcd: not stopped after %v; exiting anyway\n", timeout)
		return 1
	}
}

func parseURLs(flagName, list string) ([]url.URL, error) {
	var urls []url.URL
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		u, err := url.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("--%s: %q: %v", flagName, s, err)
		}
		if u.Scheme == "" || u.Host == "" {
			return nil, fmt.Errorf("--%s: %q is not a URL like http://127.0.0.1:2379", flagName, s)
		}
		urls = append(urls, *u)
	}
	if len(urls) == 0 {
		return nil, fmt.Errorf("--%s: no URL given", flagName)
	}
	return urls, nil
}

func listenerURL(scheme string, addr net.Addr) string {
	if addr.Network() == "unix" {
		return "unix://" + addr.String()
	}
	return scheme + "://" + addr.String()
}

func usageError(err error) int {
	fmt.Fprintf(os.Stderr, "etcd: %v\n", err)
	return 2
}
