{{- define "otel-ebpf.name" -}}
{{- .Chart.Name -}}
{{- end -}}

{{- define "otel-ebpf.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "otel-ebpf.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{ include "otel-ebpf.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "otel-ebpf.selectorLabels" -}}
app.kubernetes.io/name: {{ include "otel-ebpf.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "otel-ebpf.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "otel-ebpf.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The agent's config: the chart's settings, then extraConfig merged over them. */}}
{{- define "otel-ebpf.config" -}}
{{- $metadata := dict "source" .Values.kubernetes.metadata.source "interval" .Values.kubernetes.metadata.interval -}}
{{- if eq .Values.kubernetes.metadata.source "kubelet" -}}
{{- $_ := set $metadata "endpoint" "https://${env:K8S_NODE_IP}:10250" -}}
{{- $_ := set $metadata "insecure_skip_verify" .Values.kubernetes.metadata.kubeletInsecureSkipVerify -}}
{{- end -}}
{{- $config := dict
  "receivers" (dict "ebpf" (dict
    "sampling" (dict "ratio" .Values.sampling.ratio)
    "kubernetes" (dict "node_name" "${env:K8S_NODE_NAME}" "metadata" $metadata)))
  "processors" (dict "batch" (dict "send_batch_size" 512 "timeout" "1s"))
  "exporters" (dict "otlp" (dict "endpoint" .Values.collector.endpoint "tls" (dict "insecure" .Values.collector.insecure)))
  "service" (dict
    "pipelines" (dict
      "traces" (dict "receivers" (list "ebpf") "processors" (list "batch") "exporters" (list "otlp"))
      "metrics" (dict "receivers" (list "ebpf") "exporters" (list "otlp")))
    "telemetry" (dict "logs" (dict "level" "info"))) -}}
{{- toYaml (mustMergeOverwrite $config .Values.extraConfig) -}}
{{- end -}}
