package ctl

import "strings"

// Method names a workload.ctl call.
type Method string

// The eight methods a workload host serves.
const (
	MethodDescribe Method = "workload.describe"
	MethodPlace    Method = "workload.place"
	MethodLoad     Method = "workload.load"
	MethodStart    Method = "workload.start"
	MethodStop     Method = "workload.stop"
	MethodUnload   Method = "workload.unload"
	MethodStatus   Method = "workload.status"
	MethodLogs     Method = "workload.logs"
)

// methodPrefix is the namespace of every workload.ctl method.
const methodPrefix = "workload."

// Methods returns the eight methods in a fixed order, for advertisements.
func Methods() []Method {
	return []Method{
		MethodDescribe, MethodPlace, MethodLoad, MethodStart,
		MethodStop, MethodUnload, MethodStatus, MethodLogs,
	}
}

// Known reports whether m is one of the eight methods.
func (m Method) Known() bool {
	switch m {
	case MethodDescribe, MethodPlace, MethodLoad, MethodStart,
		MethodStop, MethodUnload, MethodStatus, MethodLogs:
		return true
	}
	return false
}

// IsMutating reports whether m changes the target's state. Mutating calls
// carry a decision id, are sent only by controllers, and are Indeterminate
// when sent without a valid answer. Unknown methods count as mutating, so
// that nothing unknown is ever treated as harmless.
func IsMutating(m Method) bool {
	switch m {
	case MethodDescribe, MethodStatus, MethodLogs:
		return false
	}
	return true
}

// IsTeardown reports whether m takes an instance down (stop, unload); a
// controller's trust policy never blocks these.
func IsTeardown(m Method) bool { return m == MethodStop || m == MethodUnload }

// checkMethod is the dispatch check of a verified request's method: an
// unknown method in the workload namespace is unknown_method, anything
// else outside the eight is invalid_request.
func checkMethod(m Method) *Refusal {
	if m.Known() {
		return nil
	}
	if strings.HasPrefix(string(m), methodPrefix) {
		return NewRefusal(CodeUnknownMethod, "method is not served")
	}
	return NewRefusal(CodeInvalidRequest, "not a workload.ctl method")
}
