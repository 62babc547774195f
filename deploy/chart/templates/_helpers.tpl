{{/*
The labels on every object's metadata (never on selectors or pod
templates, which a label change would roll): what deploy/'s kustomization
adds, and Helm's own.
*/}}
{{- define "swell.labels" -}}
app.kubernetes.io/part-of: swell
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
An image reference from its values: repository, then @digest when one is
set (it wins over the tag), else :tag, else :appVersion.
*/}}
{{- define "swell.image" -}}
{{- $image := index .root.Values.images .name -}}
{{- if $image.digest -}}
{{ $image.repository }}@{{ $image.digest }}
{{- else -}}
{{ $image.repository }}:{{ $image.tag | default .root.Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/*
The scheduling fields a component's values may set, in pod spec order.
*/}}
{{- define "swell.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end }}
