{{/*
Names and labels.
*/}}

{{/* The chart's short name. */}}
{{- define "tcab-dispatcher.name" -}}
{{- .Values.nameOverride | default .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Base name of every object: the release name, plus the chart name unless the release name already says it. */}}
{{- define "tcab-dispatcher.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $short := include "tcab-dispatcher.name" . -}}
{{- if contains $short .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $short | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels that select the dispatcher pod. */}}
{{- define "tcab-dispatcher.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tcab-dispatcher.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels on every object the chart creates (not on the pod: the dispatcher selects its own Jobs by managed-by). */}}
{{- define "tcab-dispatcher.labels" -}}
{{ include "tcab-dispatcher.selectorLabels" . }}
app.kubernetes.io/part-of: tcab
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/* The dispatcher's ServiceAccount: serviceAccount.name, else the full name when the chart creates it. */}}
{{- define "tcab-dispatcher.serviceAccountName" -}}
{{- if .Values.serviceAccount.name -}}
{{- .Values.serviceAccount.name -}}
{{- else if .Values.serviceAccount.create -}}
{{- include "tcab-dispatcher.fullname" . -}}
{{- else -}}
{{- fail "serviceAccount.name is required when serviceAccount.create is false: the existing ServiceAccount the pod runs under" -}}
{{- end -}}
{{- end -}}

{{/* The image of the three containers: repository@digest when a digest is set, else repository:tag. */}}
{{- define "tcab-dispatcher.image" -}}
{{- $repository := required "image.repository is required: the registry/name you pushed the image built from this repository's Dockerfile to, e.g. registry.example/tcab-dispatcher (no image is published under a bare name, so there is no default)" .Values.image.repository -}}
{{- if .Values.image.digest -}}
{{- if not (regexMatch "^sha256:[a-f0-9]{64}$" .Values.image.digest) -}}
{{- fail (printf "image.digest: expected sha256:<64 lowercase hex digits>, got %q" .Values.image.digest) -}}
{{- end -}}
{{- printf "%s@%s" $repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/*
The metrics endpoints of the three containers, as a list of dicts (name, port,
portName), in container order. The containers share the pod's network, so the
ports must differ from each other and from the lease-keeper's vault port.
*/}}
{{- define "tcab-dispatcher.metricsEndpoints" -}}
{{- $m := .Values.metrics -}}
{{- $endpoints := list
  (dict "name" "admitter" "port" (int $m.admitterPort) "portName" "admit-metrics")
  (dict "name" "lease-keeper" "port" (int $m.leaseKeeperPort) "portName" "lease-metrics")
  (dict "name" "reaper" "port" (int $m.reaperPort) "portName" "reap-metrics") -}}
{{- $vault := .Values.dispatcher.vaultAddr | default "127.0.0.1:50051" -}}
{{- $vaultPort := int (last (splitList ":" $vault)) -}}
{{- $seen := dict -}}
{{- range $endpoints -}}
{{- $key := toString .port -}}
{{- if hasKey $seen $key -}}
{{- fail (printf "metrics: the %s and %s ports are both %d; the three containers share the pod's network, so each needs its own port" (get $seen $key) .name .port) -}}
{{- end -}}
{{- if eq .port $vaultPort -}}
{{- fail (printf "metrics: the %s port %d is the lease-keeper's vault port (dispatcher.vaultAddr %s); pick another" .name .port $vault) -}}
{{- end -}}
{{- $_ := set $seen $key .name -}}
{{- end -}}
{{- toYaml $endpoints -}}
{{- end -}}

{{/* TCAB_DISPATCHER_METRICS_ADDR of a container, from metrics.listenHost and the container's port. */}}
{{- define "tcab-dispatcher.metricsAddr" -}}
{{- printf "%s:%d" (index . 0).Values.metrics.listenHost (int (index . 1)) -}}
{{- end -}}

{{/*
The Secret holding the backend service token: an existing one, or the one this
chart creates from backend.serviceToken.value. Exactly one of the two must be set.
*/}}
{{- define "tcab-dispatcher.tokenSecretName" -}}
{{- $t := .Values.backend.serviceToken -}}
{{- if and $t.existingSecret $t.value -}}
{{- fail "backend.serviceToken: set either existingSecret or value, not both" -}}
{{- else if $t.existingSecret -}}
{{- $t.existingSecret -}}
{{- else if $t.value -}}
{{- printf "%s-backend-token" (include "tcab-dispatcher.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- fail "backend.serviceToken is required: set backend.serviceToken.existingSecret (a Secret holding the token) or backend.serviceToken.value" -}}
{{- end -}}
{{- end -}}

{{/* The key of the token inside that Secret. */}}
{{- define "tcab-dispatcher.tokenSecretKey" -}}
{{- if .Values.backend.serviceToken.existingSecret -}}
{{- required "backend.serviceToken.existingSecretKey must not be empty" .Values.backend.serviceToken.existingSecretKey -}}
{{- else -}}
token
{{- end -}}
{{- end -}}

{{/*
The managed-by value of sandbox pods (TCAB_DRIVER_MANAGED_BY, for the admitter's
drivers and the reaper): driver.managedBy, else tcab-driver (what a driver uses
when nothing tells it otherwise), else, with driver.managedByPerRelease, one
unique to this release, so two dispatchers sharing a sandbox namespace never
sweep each other's sandboxes: the full name (at most 40 characters) plus
"-driver-" and the first 8 hex digits of SHA-256 of "<namespace>/<release>".
Always a label value of at most 63 characters. It must differ from the
dispatcher's own managed-by value.
*/}}
{{- define "tcab-dispatcher.driverManagedBy" -}}
{{- $value := .Values.driver.managedBy -}}
{{- if and (not $value) (not .Values.driver.managedByPerRelease) -}}
{{- $value = "tcab-driver" -}}
{{- end -}}
{{- if not $value -}}
{{- $base := include "tcab-dispatcher.fullname" . | trunc 40 | trimSuffix "-" | trimSuffix "." | trimSuffix "_" -}}
{{- $value = printf "%s-driver-%s" $base (sha256sum (printf "%s/%s" .Release.Namespace .Release.Name) | trunc 8) -}}
{{- end -}}
{{- if eq $value (.Values.dispatcher.managedBy | default "tcab-dispatcher") -}}
{{- fail (printf "driver.managedBy %q must differ from dispatcher.managedBy: the reaper tells a sandbox from a driver's own pod by it" $value) -}}
{{- end -}}
{{- $value -}}
{{- end -}}

{{/* The sandbox namespace: sandbox.namespace, else the release namespace. */}}
{{- define "tcab-dispatcher.sandboxNamespace" -}}
{{- .Values.sandbox.namespace | default .Release.Namespace -}}
{{- end -}}

{{/*
A value as an env var string: whole numbers print without an exponent
(Helm reads YAML numbers as floats), everything else as text.
*/}}
{{- define "tcab-dispatcher.envString" -}}
{{- if and (kindIs "float64" .) (eq . (float64 (int64 .))) -}}
{{- int64 . -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/*
The env list of one container, as YAML. Called with (list $ CONTAINER), where
CONTAINER is admitter, lease-keeper or reaper. Optional variables are rendered
only when their value is set (not null, not ""), so the binaries' own defaults
apply otherwise; required ones fail the render with a message naming the value.
*/}}
{{- define "tcab-dispatcher.env" -}}
{{- $root := index . 0 -}}
{{- $container := index . 1 -}}
{{- $v := $root.Values -}}
{{- /* the admitter and the lease-keeper talk to the backend and share the vault */ -}}
{{- $backendAndVault := or (eq $container "admitter") (eq $container "lease-keeper") -}}
{{- /* the reaper asks the backend what it drives (GET /jobs/active), unless the orphan sweep is off */ -}}
{{- $sweep := and (eq $container "reaper") (ne (toString $v.dispatcher.orphanSweep) "false") -}}
{{- $backend := or $backendAndVault $sweep -}}
{{- $env := list (dict "name" "POD_NAMESPACE" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.namespace"))) -}}
{{- if $backend -}}
{{- $url := required "backend.url is required: the backend's in-cluster base URL, e.g. http://tcab-backend.tcab.svc:8080" $v.backend.url -}}
{{- $env = append $env (dict "name" "TCAB_BACKEND_URL" "value" $url) -}}
{{- $ref := dict "name" (include "tcab-dispatcher.tokenSecretName" $root) "key" (include "tcab-dispatcher.tokenSecretKey" $root) -}}
{{- $env = append $env (dict "name" "TCAB_BACKEND_SERVICE_TOKEN" "valueFrom" (dict "secretKeyRef" $ref)) -}}
{{- end -}}
{{- if eq $container "admitter" -}}
{{- $image := required "driver.image is required: the image the admitter runs for each claimed run, e.g. registry.example/tcab-driver:3f2a9c1" $v.driver.image -}}
{{- $env = append $env (dict "name" "TCAB_DRIVER_IMAGE" "value" $image) -}}
{{- end -}}
{{- if eq $container "reaper" -}}
{{- $env = append $env (dict "name" "TCAB_K8S_NAMESPACE" "value" (include "tcab-dispatcher.sandboxNamespace" $root)) -}}
{{- end -}}
{{- if or (eq $container "admitter") (eq $container "reaper") -}}
{{- $env = append $env (dict "name" "TCAB_DRIVER_MANAGED_BY" "value" (include "tcab-dispatcher.driverManagedBy" $root)) -}}
{{- end -}}
{{- if $v.metrics.enabled -}}
{{- range (include "tcab-dispatcher.metricsEndpoints" $root | fromYamlArray) -}}
{{- if eq .name $container -}}
{{- $env = append $env (dict "name" "TCAB_DISPATCHER_METRICS_ADDR" "value" (include "tcab-dispatcher.metricsAddr" (list $root .port))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* optional variables, as (NAME VALUE) pairs */ -}}
{{- $d := $v.dispatcher -}}
{{- $opt := list
  (list "TCAB_DISPATCHER_MANAGED_BY" $d.managedBy)
  (list "TCAB_DISPATCHER_POLL_INTERVAL_SECONDS" $d.pollIntervalSeconds)
  (list "TCAB_DISPATCHER_KUBE_TIMEOUT_SECONDS" $d.kubeTimeoutSeconds)
  (list "TCAB_DISPATCHER_WATCH_TIMEOUT_SECONDS" $d.watchTimeoutSeconds)
  (list "TCAB_DISPATCHER_LOG_FORMAT" $d.logFormat)
  (list "RUST_LOG" $d.rustLog) -}}
{{- if $backend -}}
{{- $opt = append $opt (list "TCAB_DISPATCHER_BACKEND_TIMEOUT_SECONDS" $v.backend.timeoutSeconds) -}}
{{- end -}}
{{- if $backendAndVault -}}
{{- /* both check their timing against the lease: the admitter its gate age, the lease-keeper its watch timeout */ -}}
{{- $opt = concat $opt (list
  (list "TCAB_DISPATCHER_VAULT_ADDR" $d.vaultAddr)
  (list "TCAB_PUBLISHER_IMAGE" $v.publisher.image)
  (list "TCAB_DISPATCHER_LEASE_SECONDS" $d.leaseSeconds)) -}}
{{- end -}}
{{- if eq $container "admitter" -}}
{{- $dr := $v.driver -}}
{{- $opt = concat $opt (list
  (list "TCAB_DISPATCHER_MAX_INFLIGHT" $d.maxInflight)
  (list "TCAB_DISPATCHER_MAX_PUBLISH_INFLIGHT" $d.maxPublishInflight)
  (list "TCAB_DISPATCHER_GATE_MAX_AGE_SECONDS" $d.gateMaxAgeSeconds)
  (list "TCAB_DISPATCHER_JOB_TTL_SECONDS" $d.jobTtlSeconds)
  (list "TCAB_DISPATCHER_DRIVER_TERMINATION_GRACE_SECONDS" $dr.terminationGraceSeconds)
  (list "TCAB_DISPATCHER_DRIVER_CPU_REQUEST" $dr.cpuRequest)
  (list "TCAB_DISPATCHER_DRIVER_MEMORY_REQUEST" $dr.memoryRequest)
  (list "TCAB_DISPATCHER_DRIVER_CPU_LIMIT" $dr.cpuLimit)
  (list "TCAB_DISPATCHER_DRIVER_MEMORY_LIMIT" $dr.memoryLimit)
  (list "TCAB_DISPATCHER_DRIVER_ACTIVE_DEADLINE_SECONDS" $dr.activeDeadlineSeconds)
  (list "TCAB_DISPATCHER_PUBLISHER_ACTIVE_DEADLINE_SECONDS" $v.publisher.activeDeadlineSeconds)
  (list "TCAB_DISPATCHER_PUBLISHER_CPU_REQUEST" $v.publisher.cpuRequest)
  (list "TCAB_DISPATCHER_PUBLISHER_MEMORY_REQUEST" $v.publisher.memoryRequest)
  (list "TCAB_DISPATCHER_PUBLISHER_CPU_LIMIT" $v.publisher.cpuLimit)
  (list "TCAB_DISPATCHER_PUBLISHER_MEMORY_LIMIT" $v.publisher.memoryLimit)
  (list "TCAB_DRIVER_ARTIFACTS_URL" $dr.artifactsUrl)
  (list "TCAB_DRIVER_REPOS_URL" $dr.reposUrl)
  (list "TCAB_DRIVER_FINISH_DEADLINE_SECONDS" $dr.finishDeadlineSeconds)
  (list "TCAB_DRIVER_REPORT_DEADLINE_SECONDS" $dr.reportDeadlineSeconds)
  (list "TCAB_DRIVER_SECRETS" (join "," ($dr.secrets | default list)))
  (list "TCAB_DRIVER_SUBSCRIPTION_SECRET" $dr.subscription.secret)
  (list "TCAB_DRIVER_SUBSCRIPTION_DIR" $dr.subscription.dir)
  (list "TCAB_DRIVER_FS_GROUP" $dr.fsGroup)
  (list "TCAB_DRIVER_SERVICE_ACCOUNT" $dr.serviceAccount)
  (list "TCAB_K8S_NAMESPACE" $v.sandbox.namespace)) -}}
{{- end -}}
{{- if eq $container "lease-keeper" -}}
{{- $opt = concat $opt (list
  (list "TCAB_DISPATCHER_LOG_TAIL_LINES" $d.logTailLines)
  (list "TCAB_DISPATCHER_VAULT_ALLOW_NON_LOOPBACK" $d.vaultAllowNonLoopback)
  (list "TCAB_DISPATCHER_START_GRACE_SECONDS" $d.startGraceSeconds)
  (list "TCAB_DISPATCHER_UNSCHEDULABLE_GRACE_SECONDS" $d.unschedulableGraceSeconds)) -}}
{{- end -}}
{{- if or (eq $container "lease-keeper") (eq $container "reaper") -}}
{{- $opt = append $opt (list "TCAB_DISPATCHER_TERMINATING_MARGIN_SECONDS" $d.terminatingMarginSeconds) -}}
{{- end -}}
{{- if eq $container "reaper" -}}
{{- $opt = concat $opt (list
  (list "TCAB_DISPATCHER_ORPHAN_SWEEP" $d.orphanSweep)
  (list "TCAB_DISPATCHER_ORPHAN_GRACE_SECONDS" $d.orphanGraceSeconds)
  (list "TCAB_DISPATCHER_ORPHAN_SWEEP_INTERVAL_SECONDS" $d.orphanSweepIntervalSeconds)) -}}
{{- end -}}
{{- range $opt -}}
{{- $val := index . 1 -}}
{{- if not (kindIs "invalid" $val) -}}
{{- $s := include "tcab-dispatcher.envString" $val -}}
{{- if ne $s "" -}}
{{- $env = append $env (dict "name" (index . 0) "value" $s) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* the Jobs' securityContexts (admitter only), as JSON and only when set: the binary
     owns the default, and {} (which turns it off) is set, so it renders */ -}}
{{- if eq $container "admitter" -}}
{{- range (list
  (list "TCAB_DISPATCHER_DRIVER_POD_SECURITY_CONTEXT" $v.driver.podSecurityContext)
  (list "TCAB_DISPATCHER_DRIVER_SECURITY_CONTEXT" $v.driver.securityContext)
  (list "TCAB_DISPATCHER_PUBLISHER_POD_SECURITY_CONTEXT" $v.publisher.podSecurityContext)
  (list "TCAB_DISPATCHER_PUBLISHER_SECURITY_CONTEXT" $v.publisher.securityContext)) -}}
{{- $val := index . 1 -}}
{{- if not (kindIs "invalid" $val) -}}
{{- $env = append $env (dict "name" (index . 0) "value" (toJson $val)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* the operator's passthrough variables for driver pods (admitter only) */ -}}
{{- if eq $container "admitter" -}}
{{- range $key, $value := $v.driver.passthroughEnv -}}
{{- if not (or (hasPrefix "TCAB_K8S_" $key) (hasPrefix "TCAB_CONTAINER_" $key)) -}}
{{- fail (printf "driver.passthroughEnv: key %q is not allowed: keys must start with TCAB_K8S_ or TCAB_CONTAINER_" $key) -}}
{{- end -}}
{{- if eq $key "TCAB_K8S_NAMESPACE" -}}
{{- fail "driver.passthroughEnv: TCAB_K8S_NAMESPACE is not allowed here: set the sandbox namespace with sandbox.namespace, so the reaper and its RBAC follow it" -}}
{{- end -}}
{{- $env = append $env (dict "name" $key "value" (include "tcab-dispatcher.envString" $value)) -}}
{{- end -}}
{{- end -}}
{{- /* the operator's extra variables (all containers): never one the chart sets or a TCAB_* one */ -}}
{{- $set := dict -}}
{{- range $env -}}
{{- $_ := set $set .name true -}}
{{- end -}}
{{- range $v.extraEnv -}}
{{- if not .name -}}
{{- fail "extraEnv: every entry needs a name" -}}
{{- end -}}
{{- if or (hasPrefix "TCAB_" .name) (hasKey $set .name) (has .name (list "POD_NAMESPACE" "RUST_LOG")) -}}
{{- fail (printf "extraEnv: %s is set by the chart (TCAB_* variables and RUST_LOG are chart values: see the README's values table)" .name) -}}
{{- end -}}
{{- $env = append $env . -}}
{{- end -}}
{{- toYaml $env -}}
{{- end -}}

{{/*
The securityContext of each container: containerSecurityContext merged over the
hardened one. What would weaken it is refused here as well as by the schema.
*/}}
{{- define "tcab-dispatcher.containerSecurityContext" -}}
{{- $hardened := dict "allowPrivilegeEscalation" false "readOnlyRootFilesystem" true "runAsNonRoot" true "privileged" false "capabilities" (dict "drop" (list "ALL")) -}}
{{- $given := .Values.containerSecurityContext | default dict -}}
{{- range $key, $want := (dict "allowPrivilegeEscalation" false "readOnlyRootFilesystem" true "runAsNonRoot" true "privileged" false) -}}
{{- if and (hasKey $given $key) (ne (toString (get $given $key)) (toString $want)) -}}
{{- fail (printf "containerSecurityContext.%s must stay %v: the dispatcher runs unprivileged, non-root, on a read-only root filesystem" $key $want) -}}
{{- end -}}
{{- end -}}
{{- if and (hasKey $given "runAsUser") (eq (int (get $given "runAsUser")) 0) -}}
{{- fail "containerSecurityContext.runAsUser must not be 0: the dispatcher runs as a non-root user" -}}
{{- end -}}
{{- if eq (toString (dig "seccompProfile" "type" "" $given)) "Unconfined" -}}
{{- fail "containerSecurityContext.seccompProfile.type Unconfined is refused: the dispatcher runs under RuntimeDefault (or a Localhost profile)" -}}
{{- end -}}
{{- if hasKey $given "capabilities" -}}
{{- $caps := get $given "capabilities" | default dict -}}
{{- if get $caps "add" -}}
{{- fail "containerSecurityContext.capabilities.add is refused: the dispatcher needs no capability" -}}
{{- end -}}
{{- if and (hasKey $caps "drop") (not (has "ALL" (get $caps "drop"))) -}}
{{- fail "containerSecurityContext.capabilities.drop must keep ALL: the dispatcher needs no capability" -}}
{{- end -}}
{{- end -}}
{{- mergeOverwrite $hardened (deepCopy $given) | toYaml -}}
{{- end -}}

{{/*
The labels of one alert, as YAML: its default severity, alertLabels over it, then the
alert's own labels and its own severity (alerts.<name>): one severity key, never two.
Called with (list PROMETHEUSRULE ALERT_SETTINGS DEFAULT_SEVERITY).
*/}}
{{- define "tcab-dispatcher.alertLabels" -}}
{{- $r := index . 0 -}}
{{- $a := index . 1 -}}
{{- $labels := dict "severity" (index . 2) -}}
{{- $labels = mergeOverwrite $labels (deepCopy ($r.alertLabels | default dict)) (deepCopy ($a.labels | default dict)) -}}
{{- with $a.severity -}}
{{- $_ := set $labels "severity" . -}}
{{- end -}}
{{- toYaml $labels -}}
{{- end -}}
