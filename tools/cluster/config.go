package cluster

import (
	"bytes"
	"text/template"
)

// serviceNames are the Temporal server's services, in start order: history
// owns the shards the others route to.
var serviceNames = []string{"history", "matching", "frontend", "worker"}

// configData fills configTemplate for one process.
type configData struct {
	Host            string
	Port            int // Postgres
	User            string
	Database        string
	Visibility      string
	Shards          int
	MetricsAddr     string
	DynamicConfig   string
	FrontendGRPC    int
	FrontendHTTP    int
	FrontendMember  int
	HistoryGRPC     int
	HistoryMember   int
	MatchingGRPC    int
	MatchingMember  int
	WorkerGRPC      int
	WorkerMember    int
	MaxConns        int
	VisibilityConns int
	// TLS, when set, makes the frontend serve mutual TLS.
	TLS *TLS
}

// configTemplate is the server's development-postgres12.yaml (v1.29.1) with
// the databases, ports and metrics address filled in, archival off and
// pprof off. Every process of a cluster gets the same file but its own
// metrics address.
var configTemplate = template.Must(template.New("config").Parse(`log:
  stdout: true
  level: warn

persistence:
  defaultStore: postgres-default
  visibilityStore: postgres-visibility
  numHistoryShards: {{.Shards}}
  datastores:
    postgres-default:
      sql:
        pluginName: "postgres12"
        databaseName: "{{.Database}}"
        connectAddr: "{{.Host}}:{{.Port}}"
        connectProtocol: "tcp"
        user: "{{.User}}"
        password: ""
        maxConns: {{.MaxConns}}
        maxIdleConns: {{.MaxConns}}
        maxConnLifetime: "1h"
    postgres-visibility:
      sql:
        pluginName: "postgres12"
        databaseName: "{{.Visibility}}"
        connectAddr: "{{.Host}}:{{.Port}}"
        connectProtocol: "tcp"
        user: "{{.User}}"
        password: ""
        maxConns: {{.VisibilityConns}}
        maxIdleConns: {{.VisibilityConns}}
        maxConnLifetime: "1h"

global:
{{- with .TLS}}
  tls:
    frontend:
      server:
        certFile: "{{.ServerCert}}"
        keyFile: "{{.ServerKey}}"
        requireClientAuth: true
        clientCaFiles: ["{{.CA}}"]
      client:
        serverName: "localhost"
        rootCaFiles: ["{{.CA}}"]
    systemWorker:
      certFile: "{{.ClientCert}}"
      keyFile: "{{.ClientKey}}"
      client:
        serverName: "localhost"
        rootCaFiles: ["{{.CA}}"]
{{- end}}
  membership:
    maxJoinDuration: 30s
    broadcastAddress: "127.0.0.1"
  metrics:
    prometheus:
      framework: "tally"
      timerType: "histogram"
      listenAddress: "{{.MetricsAddr}}"

services:
  frontend:
    rpc:
      grpcPort: {{.FrontendGRPC}}
      membershipPort: {{.FrontendMember}}
      bindOnLocalHost: true
      httpPort: {{.FrontendHTTP}}
  matching:
    rpc:
      grpcPort: {{.MatchingGRPC}}
      membershipPort: {{.MatchingMember}}
      bindOnLocalHost: true
  history:
    rpc:
      grpcPort: {{.HistoryGRPC}}
      membershipPort: {{.HistoryMember}}
      bindOnLocalHost: true
  worker:
    rpc:
      grpcPort: {{.WorkerGRPC}}
      membershipPort: {{.WorkerMember}}
      bindOnLocalHost: true

clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: "active"
  currentClusterName: "active"
  clusterInformation:
    active:
      enabled: true
      initialFailoverVersion: 1
      rpcName: "frontend"
      rpcAddress: "127.0.0.1:{{.FrontendGRPC}}"

dcRedirectionPolicy:
  policy: "noop"

archival:
  history:
    state: "disabled"
  visibility:
    state: "disabled"

namespaceDefaults:
  archival:
    history:
      state: "disabled"
    visibility:
      state: "disabled"

dynamicConfigClient:
  filepath: "{{.DynamicConfig}}"
  pollInterval: "10s"
`))

// dynamicConfig is the cluster's dynamic configuration: search attributes
// are read through on every start, so `worker setup`'s registration is seen
// at once, as on the dev server.
const dynamicConfig = `system.forceSearchAttributesCacheRefreshOnRead:
  - value: true
    constraints: {}
`

func renderConfig(d configData) ([]byte, error) {
	var b bytes.Buffer
	if err := configTemplate.Execute(&b, d); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
