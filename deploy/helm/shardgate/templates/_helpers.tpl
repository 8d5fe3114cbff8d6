{{/*
Chart name, truncated to a DNS label.
*/}}
{{- define "shardgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of the release's objects: the release name when it already contains
the chart name ("shardgate" for `helm install shardgate`), else
"<release>-<chart>".
*/}}
{{- define "shardgate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Labels that select the operator's pods. Never change them on upgrade: a
Deployment's selector is immutable.
*/}}
{{- define "shardgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "shardgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Labels on every object.
*/}}
{{- define "shardgate.labels" -}}
{{ include "shardgate.selectorLabels" . }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: shardgate
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The ServiceAccount the operator runs as.
*/}}
{{- define "shardgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "shardgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The image reference.
*/}}
{{- define "shardgate.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/*
Settings that cannot work together; fails the render with a message.
*/}}
{{- define "shardgate.validate" -}}
{{- if and (not .Values.leaderElection.enabled) (gt (int .Values.replicaCount) 1) }}
{{- fail "leaderElection.enabled=false requires replicaCount: 1 (two operators without a leader would both reconcile)" }}
{{- end }}
{{- end }}
