// Command allocator is the test oracle: Kubernetes v1.37.2's own structured
// DRA allocator (k8s.io/dynamic-resource-allocation/structured), driven by
// JSON lines on stdin, one verdict per line on stdout.
//
// Each input line is a case:
//
//	{"mode": "allocate" | "validate",
//	 "features": {...structured.Features...},   // omitted: every DRA feature on by default in 1.37.2
//	 "nodes": [Node], "slices": [ResourceSlice], "classes": [DeviceClass],
//	 "allocated": [ResourceClaim],               // claims already allocated: what they hold is taken
//	 "claims": [ResourceClaim],                  // one pod's unallocated claims, allocated together
//	 "node": "name",                             // validate: the node the allocation is for
//	 "results": [AllocationResult]}              // validate: one per claim, in order
//
// allocate runs NewAllocator + Allocate on every node in turn (upstream's
// scheduler does the same, per pod, in its Filter) and answers
// {"nodes": {"n1": {"ok": true, "allocations": [...]}, "n2": {"ok": false, "error": "..."}}}.
//
// validate answers {"ok": bool, "error": "...", "allocations": [...]}: ok when
// upstream's allocator, asked to allocate the same claims on the same node
// with every request narrowed to exactly the devices the given results name
// for it, finds an allocation; the caller compares what it found against the
// given results. An "All" request is not narrowed (upstream must find the
// same set), a firstAvailable request keeps only the subrequest chosen.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"
)

// The DRA features on by default in Kubernetes v1.37.2 (pkg/features/kube_features.go):
// AdminAccess (GA), ConsumableCapacity (beta), DeviceBindingConditions +
// ResourceClaimDeviceStatus (beta/GA), DeviceTaints (GA), FractionalCapacityRange
// (beta), PartitionableDevices (beta), PrioritizedList (GA). Off: DerivedAttributes,
// DeviceCompatibilityGroups, ListTypeAttributes, OptionalNodeOperations (alpha).
var defaultFeatures = structured.Features{
	AdminAccess:             true,
	ConsumableCapacity:      true,
	DeviceBindingAndStatus:  true,
	DeviceTaints:            true,
	FractionalCapacityRange: true,
	PartitionableDevices:    true,
	PrioritizedList:         true,
}

// idDomain is the attribute validate adds to every device so a selector can name it.
const idDomain = "oracle.phalanx.dev"

type input struct {
	Mode      string                         `json:"mode"`
	Features  *structured.Features           `json:"features"`
	Nodes     []v1.Node                      `json:"nodes"`
	Slices    []resourceapi.ResourceSlice    `json:"slices"`
	Classes   []resourceapi.DeviceClass      `json:"classes"`
	Allocated []resourceapi.ResourceClaim    `json:"allocated"`
	Claims    []resourceapi.ResourceClaim    `json:"claims"`
	Node      string                         `json:"node"`
	Results   []resourceapi.AllocationResult `json:"results"`
}

type verdict struct {
	OK          bool                           `json:"ok"`
	Error       string                         `json:"error,omitempty"`
	Fatal       bool                           `json:"fatal,omitempty"`
	Allocations []resourceapi.AllocationResult `json:"allocations,omitempty"`
}

type output struct {
	Nodes map[string]verdict `json:"nodes,omitempty"`
	*verdict
	Problem string `json:"problem,omitempty"`
}

type classes map[string]*resourceapi.DeviceClass

func (c classes) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(c))
	for _, class := range c {
		out = append(out, class)
	}
	return out, nil
}

func (c classes) Get(name string) (*resourceapi.DeviceClass, error) {
	if class, ok := c[name]; ok {
		return class, nil
	}
	return nil, fmt.Errorf("deviceclass %q not found", name)
}

// allocatedState is what upstream's claim tracker gathers (GatherAllocatedState with
// consumable capacity on): dedicated devices, shared device ids, consumed capacity;
// a result with adminAccess takes nothing.
func allocatedState(claims []resourceapi.ResourceClaim) structured.AllocatedState {
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, claim := range claims {
		if claim.Status.Allocation == nil {
			continue
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			if ptr.Deref(r.AdminAccess, false) {
				continue
			}
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			if r.ShareID != nil {
				state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
				if r.ConsumedCapacity != nil {
					state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
				}
				continue
			}
			state.AllocatedDevices.Insert(id)
		}
	}
	return state
}

func run(ctx context.Context, in *input, slices []resourceapi.ResourceSlice, claims []resourceapi.ResourceClaim, node *v1.Node) verdict {
	features := defaultFeatures
	if in.Features != nil {
		features = *in.Features
	}
	byName := classes{}
	for i := range in.Classes {
		byName[in.Classes[i].Name] = &in.Classes[i]
	}
	slicePtrs := make([]*resourceapi.ResourceSlice, len(slices))
	for i := range slices {
		slicePtrs[i] = &slices[i]
	}
	claimPtrs := make([]*resourceapi.ResourceClaim, len(claims))
	for i := range claims {
		claimPtrs[i] = &claims[i]
	}
	cache := cel.NewCache(100, cel.Features{EnableConsumableCapacity: features.ConsumableCapacity, EnableListTypeAttributes: features.ListTypeAttributes})
	allocator, err := structured.NewAllocator(ctx, features, allocatedState(in.Allocated), byName, slicePtrs, cache)
	if err != nil {
		return verdict{Error: err.Error(), Fatal: true}
	}
	results, err := allocator.Allocate(ctx, node, claimPtrs)
	if err != nil {
		// ErrFailedAllocationOnNode: this node only; anything else aborts the pod's scheduling attempt.
		return verdict{Error: err.Error(), Fatal: !errors.Is(err, structured.ErrFailedAllocationOnNode)}
	}
	if results == nil {
		return verdict{Error: "cannot allocate all claims"}
	}
	return verdict{OK: true, Allocations: results}
}

func allocate(ctx context.Context, in *input) output {
	out := output{Nodes: map[string]verdict{}}
	for i := range in.Nodes {
		out.Nodes[in.Nodes[i].Name] = run(ctx, in, in.Slices, in.Claims, &in.Nodes[i])
	}
	return out
}

func deviceKey(pool, device string) string { return pool + "/" + device }

// narrowed gives each device an id attribute and each claim request a selector on the devices the results name for it.
func validate(ctx context.Context, in *input) output {
	var node *v1.Node
	for i := range in.Nodes {
		if in.Nodes[i].Name == in.Node {
			node = &in.Nodes[i]
		}
	}
	if node == nil {
		return output{Problem: fmt.Sprintf("node %q not among the nodes", in.Node)}
	}
	if len(in.Results) != len(in.Claims) {
		return output{Problem: fmt.Sprintf("%d results for %d claims", len(in.Results), len(in.Claims))}
	}
	slices := make([]resourceapi.ResourceSlice, len(in.Slices))
	for i := range in.Slices {
		slices[i] = *in.Slices[i].DeepCopy()
		for j := range slices[i].Spec.Devices {
			d := &slices[i].Spec.Devices[j]
			if d.Attributes == nil {
				d.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
			}
			id := deviceKey(slices[i].Spec.Pool.Name, d.Name)
			d.Attributes[idDomain+"/id"] = resourceapi.DeviceAttribute{StringValue: &id}
		}
	}
	claims := make([]resourceapi.ResourceClaim, len(in.Claims))
	for c := range in.Claims {
		claims[c] = *in.Claims[c].DeepCopy()
		chosen := map[string][]string{} // request name as in the result ("req" or "req/sub") -> device keys
		for _, r := range in.Results[c].Devices.Results {
			chosen[r.Request] = append(chosen[r.Request], deviceKey(r.Pool, r.Device))
		}
		for i := range claims[c].Spec.Devices.Requests {
			req := &claims[c].Spec.Devices.Requests[i]
			if req.Exactly != nil {
				if req.Exactly.AllocationMode == resourceapi.DeviceAllocationModeAll {
					continue
				}
				req.Exactly.Selectors = append(req.Exactly.Selectors, only(chosen[req.Name]))
				continue
			}
			var kept []resourceapi.DeviceSubRequest
			for _, sub := range req.FirstAvailable {
				if ids, ok := chosen[req.Name+"/"+sub.Name]; ok {
					if sub.AllocationMode != resourceapi.DeviceAllocationModeAll {
						sub.Selectors = append(sub.Selectors, only(ids))
					}
					kept = append(kept, sub)
				}
			}
			req.FirstAvailable = kept
		}
	}
	v := run(ctx, in, slices, claims, node)
	return output{verdict: &v}
}

func only(ids []string) resourceapi.DeviceSelector {
	sort.Strings(ids)
	quoted := make([]string, len(ids))
	for i, id := range ids {
		quoted[i] = fmt.Sprintf("%q", id)
	}
	expr := fmt.Sprintf("device.attributes[%q].id in [%s]", idDomain, strings.Join(quoted, ", "))
	return resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}
}


func main() {
	ctx := context.Background()
	scanner := bufio.NewScanner(os.Stdin)
	scanner.Buffer(make([]byte, 1<<20), 64<<20)
	enc := json.NewEncoder(os.Stdout)
	for scanner.Scan() {
		var in input
		var out output
		if err := json.Unmarshal(scanner.Bytes(), &in); err != nil {
			out = output{Problem: "bad input: " + err.Error()}
		} else {
			switch in.Mode {
			case "allocate":
				out = allocate(ctx, &in)
			case "validate":
				out = validate(ctx, &in)
			default:
				out = output{Problem: fmt.Sprintf("mode %q: want allocate or validate", in.Mode)}
			}
		}
		if err := enc.Encode(out); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if err := scanner.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
