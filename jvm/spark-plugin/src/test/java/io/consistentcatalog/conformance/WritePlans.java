package io.consistentcatalog.conformance;

import io.consistentcatalog.core.ConsistentException;
import io.consistentcatalog.core.Definitions;
import io.consistentcatalog.core.EpochCommits;
import io.consistentcatalog.core.EpochPlanner;
import io.consistentcatalog.core.ErrorKind;
import io.consistentcatalog.core.Keys;
import io.consistentcatalog.core.Ownership;
import io.consistentcatalog.core.Resolver;
import io.consistentcatalog.core.TableState;
import io.consistentcatalog.core.WritePlanner;
import io.consistentcatalog.spark.context.GenesisSnapshots;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.function.Function;
import org.apache.iceberg.MetadataUpdate;
import org.apache.iceberg.MetadataUpdateParser;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.UpdateRequirement;
import org.apache.iceberg.UpdateRequirementParser;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.JsonNode;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.node.ArrayNode;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.node.JsonNodeFactory;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * The write-plan queries of the conformance corpus ({@code tests/conformance/write_plans.py}, which defines the
 * query and answer formats): {@code "write-plan"}, the epoch {@link EpochPlanner#plan} plans and the commits
 * {@link EpochCommits} builds for each sink's action, in the order {@code EpochCommit} sends them (requirements
 * and updates in Iceberg's REST JSON, by {@link UpdateRequirementParser} and {@link MetadataUpdateParser});
 * {@code "write-commit"}, the protocol's other commits as {@link WritePlanner} plans them;
 * {@code "new-edges"}, registration's cycle check ({@link EpochPlanner#checkNewEdges}, the job-level check included);
 * {@code "can-own"} ({@link Ownership#checkCanOwn}), {@code "definition"} ({@link EpochPlanner#definitionChange}) and
 * {@code "fingerprint-sql"} ({@link Definitions#sql}). The snapshot ids a
 * commit creates are left as they are: the Python side names them before comparing.
 */
final class WritePlans {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final JsonNodeFactory NODES = JsonNodeFactory.instance;

  private WritePlans() {}

  static boolean handles(JsonNode query) {
    String kind = query.path("kind").asText("");
    return kind.equals("write-plan") || kind.equals("new-edges") || kind.equals("can-own") || kind.equals("definition")
        || kind.equals("fingerprint-sql") || kind.equals("write-commit");
  }

  /**
   * {@code "write-commit"}: one of the protocol's other commits as {@link WritePlanner} plans it over the case's table
   * at the query's clock (the query and answer formats are {@code write_plans.py}'s).
   */
  private static JsonNode answerWriteCommit(Function<String, TableState> load, JsonNode query) {
    ObjectNode out = NODES.objectNode();
    try {
      String table = query.get("table").asText();
      TableState state = load.apply(table);
      if (state == null) {
        throw new ConsistentException(ErrorKind.TABLE_NOT_FOUND, table, "table " + table + " does not exist");
      }
      String kind = query.get("commit").asText();
      long now = query.get("now").longValue();
      boolean allowFuture = query.path("allow_future").asBoolean(false);
      boolean takeover = query.path("takeover").asBoolean(false);
      String job = query.hasNonNull("job") ? query.get("job").asText() : null;
      String instance = query.hasNonNull("instance") ? query.get("instance").asText() : null;
      WritePlanner.Commit commit;
      switch (kind) {
        case "ingest": {
          JsonNode barrier = query.get("barrier");
          Long wanted = barrier == null || barrier.isNull() ? null
              : barrier.isTextual() && barrier.asText().equals("late") ? WritePlanner.LATE : barrier.longValue();
          String key = query.hasNonNull("key") ? query.get("key").asText() : null;
          WritePlanner.IngestPlan plan = WritePlanner.ingest(state, now, wanted, key, allowFuture, null);
          if (plan.skippedBy != null) {
            out.put("skipped_by", plan.skippedBy);
            putLong(out, "barrier", plan.barrier);
            return out;
          }
          putLong(out, "barrier", plan.barrier);
          out.set("commit", writeCommitJson(plan.commit));
          return out;
        }
        case "advance":
          commit = WritePlanner.advanceWatermark(state, query.get("barrier").longValue(), now, allowFuture);
          break;
        case "idle-advance":
          commit = WritePlanner.idleAdvance(state, now, query.hasNonNull("target") ? query.get("target").longValue() : null);
          break;
        case "register":
          commit = WritePlanner.register(state, job, strings(query.get("sources")), instance, takeover, now,
              query.get("lease_ms").longValue(), query.get("holder_info").asText(), "lake_consistent", false,
              query.path("holder_gone").asBoolean(false));
          break;
        case "unregister":
          commit = WritePlanner.unregister(state, job, instance);
          break;
        case "renew":
          commit = WritePlanner.renew(state, job, instance, query.get("until").longValue());
          break;
        case "reassign":
          commit = WritePlanner.reassign(state, job, takeover, now, "lake_consistent");
          break;
        default:
          throw new IllegalArgumentException("no write commit " + kind);
      }
      out.set("commit", writeCommitJson(commit));
      return out;
    } catch (ConsistentException e) {
      ObjectNode node = NODES.objectNode();
      node.put("error", e.pythonName());
      node.put("message", e.getMessage());
      return node;
    }
  }

  private static JsonNode writeCommitJson(WritePlanner.Commit commit) {
    if (commit == null) {
      return NODES.nullNode();
    }
    ObjectNode node = NODES.objectNode();
    node.put("what", commit.what);
    node.set("requirements", requirementsJson(commit.requirements));
    ArrayNode updates = NODES.arrayNode();
    for (MetadataUpdate update : commit.updates) {
      updates.add(parse(MetadataUpdateParser.toJson(update)));
    }
    node.set("updates", updates);
    if (commit.fence == null) {
      node.putNull("take_fence");
    } else {
      ObjectNode fence = NODES.objectNode();
      putLong(fence, "expected", commit.fence.expected);
      fence.put("reason", commit.fence.reason);
      fence.put("holder", commit.fence.holder);
      fence.put("job", commit.fence.job);
      node.set("take_fence", fence);
    }
    ObjectNode summary = NODES.objectNode();
    commit.summary.forEach(summary::put);
    node.set("summary", summary);
    node.put("genesis", commit.genesis);
    return node;
  }

  /** The queries of protocol §6.2 and §6.10: {@code can-own}, {@code definition}, {@code fingerprint-sql}. */
  private static JsonNode answerDefinitions(Function<String, TableState> load, JsonNode query) {
    String kind = query.get("kind").asText();
    ObjectNode out = NODES.objectNode();
    try {
      if (kind.equals("fingerprint-sql")) {
        out.put("fingerprint", Definitions.sql(query.get("text").asText()));
        return out;
      }
      String sink = query.get("sink").asText();
      TableState state = load.apply(sink);
      if (state == null) {
        throw new ConsistentException(ErrorKind.TABLE_NOT_FOUND, sink, "table " + sink + " does not exist");
      }
      String job = query.get("job").asText();
      if (kind.equals("can-own")) {
        Ownership.checkCanOwn(state, job, query.path("instance").asText(""), query.path("takeover").asBoolean(false),
            query.get("now").longValue(), "lake_consistent", false, query.path("holder_gone").asBoolean(false));
        out.put("ok", true);
        return out;
      }
      JsonNode definition = query.get("definition");
      Definitions.Change change = EpochPlanner.definitionChange(state, job,
          definition == null || definition.isNull() ? null : definition.asText(), query.path("rebuild").asBoolean(false));
      out.put("revise", change != null);
      if (change == null) {
        out.putNull("reason");
      } else {
        out.put("reason", change.reason);
      }
      String recorded = change == null ? null : change.recorded; // for "schema": the last epoch's schema id
      if (recorded == null) {
        out.putNull("recorded");
      } else {
        out.put("recorded", recorded);
      }
      return out;
    } catch (ConsistentException e) {
      ObjectNode node = NODES.objectNode();
      node.put("error", e.pythonName());
      node.put("message", e.getMessage());
      return node;
    }
  }

  static JsonNode answer(
      Map<String, JsonNode> tables, Function<String, TableMetadata> metadata, Function<String, TableState> load,
      JsonNode query) {
    String queryKind = query.get("kind").asText();
    if (queryKind.equals("write-commit")) {
      return answerWriteCommit(load, query);
    }
    if (!queryKind.equals("write-plan") && !queryKind.equals("new-edges")) {
      return answerDefinitions(load, query);
    }
    String job = query.get("job").asText();
    List<String> sources = strings(query.get("sources"));
    List<String> sinks = strings(query.get("sinks"));
    try {
      if (query.get("kind").asText().equals("new-edges")) {
        Map<String, TableState> others = new LinkedHashMap<>();
        for (String name : tables.keySet()) {
          if (!sinks.contains(name)) {
            others.put(name, load.apply(name));
          }
        }
        EpochPlanner.checkNewEdges(job, new TreeSet<>(sources), new TreeSet<>(sinks), others);
        ObjectNode ok = NODES.objectNode();
        ok.put("ok", true);
        return ok;
      }
      Map<String, TableState> sinkStates = new LinkedHashMap<>();
      for (String sink : sinks) {
        TableState state = load.apply(sink);
        if (state == null) {
          throw new ConsistentException(ErrorKind.TABLE_NOT_FOUND, sink, "table " + sink + " does not exist");
        }
        sinkStates.put(sink, state);
      }
      // as EpochWrites plans: the sources' upstream closure, the sources by name
      Map<String, TableState> closure = Resolver.upstreamStates(sources, load, true);
      Map<String, TableState> sourceStates = new TreeMap<>();
      for (String source : sources) {
        sourceStates.put(source, closure.get(source));
      }
      JsonNode definition = query.get("definition");
      EpochPlanner.Plan plan = EpochPlanner.plan(job, sourceStates, sinkStates, closure,
          definition == null || definition.isNull() ? null : definition.asText(), query.path("rebuild").asBoolean(false));
      ObjectNode commits = NODES.objectNode();
      for (String sink : sinks) {
        commits.set(sink, commits(plan, sink, sinkStates.get(sink), metadata.apply(sink), query));
      }
      ObjectNode out = NODES.objectNode();
      out.set("plan", planJson(plan));
      out.set("commits", commits);
      return out;
    } catch (ConsistentException e) {
      ObjectNode node = NODES.objectNode();
      node.put("error", e.pythonName());
      node.put("message", e.getMessage());
      return node;
    }
  }

  /** The commits {@code EpochCommit} sends for {@code sink}'s action, in order. */
  private static ArrayNode commits(
      EpochPlanner.Plan plan, String sink, TableState state, TableMetadata metadata, JsonNode query) {
    ArrayNode out = NODES.arrayNode();
    EpochPlanner.SinkPlan sinkPlan = plan.sinks.get(sink);
    long leaseUntil = query.get("lease_until").longValue();
    if (plan.barrier == null || sinkPlan.action == EpochPlanner.Action.DONE) {
      return out;
    }
    switch (sinkPlan.action) {
      case REGENERATE:
        if (sinkPlan.replay) {
          out.add(commitJson("publish",
              EpochCommits.publish(plan, sink, state, sinkPlan.mainHead, sinkPlan.stagedHead, leaseUntil)));
          return out;
        }
        break;
      case PUBLISH_STAGED:
        out.add(commitJson("publish",
            EpochCommits.publish(plan, sink, state, sinkPlan.mainHead, sinkPlan.stagedHead, leaseUntil)));
        return out;
      case WATERMARK:
        out.add(commitJson("publish", EpochCommits.publish(plan, sink, state, sinkPlan.mainHead, null, leaseUntil)));
        return out;
      default:
        break;
    }
    Long base = sinkPlan.mainHead;
    if (base == null) {
      Snapshot genesis = GenesisSnapshots.create(metadata, plan.job);
      out.add(commitJson("genesis", EpochCommits.genesis(sinkPlan, genesis)));
      base = genesis.snapshotId();
    }
    Long staged = state.head(Keys.STAGED_BRANCH); // the genesis commit leaves consistent-staged as it was
    if (!base.equals(staged)) {
      out.add(commitJson("reset", EpochCommits.reset(sinkPlan, base, staged)));
    }
    ObjectNode write = NODES.objectNode();
    write.put("commit", "staged-write");
    write.set("requirements", requirementsJson(EpochCommits.stagedWrite(sinkPlan, base)));
    ObjectNode summary = NODES.objectNode();
    EpochCommits.summary(plan, sink, plan.job, query.get("attempt").asText()).forEach(summary::put);
    write.set("summary", summary);
    out.add(write);
    out.add(commitJson("publish",
        EpochCommits.publish(plan, sink, state, base, query.get("written").longValue(), leaseUntil)));
    return out;
  }

  private static ObjectNode commitJson(String name, EpochCommits.Commit commit) {
    ObjectNode node = NODES.objectNode();
    node.put("commit", name);
    node.put("what", commit.what);
    node.set("requirements", requirementsJson(commit.requirements));
    ArrayNode updates = NODES.arrayNode();
    for (MetadataUpdate update : commit.updates) {
      updates.add(parse(MetadataUpdateParser.toJson(update)));
    }
    node.set("updates", updates);
    return node;
  }

  private static ArrayNode requirementsJson(List<UpdateRequirement> requirements) {
    ArrayNode out = NODES.arrayNode();
    for (UpdateRequirement requirement : requirements) {
      out.add(parse(UpdateRequirementParser.toJson(requirement)));
    }
    return out;
  }

  private static ObjectNode planJson(EpochPlanner.Plan plan) {
    ObjectNode node = NODES.objectNode();
    putLong(node, "barrier", plan.barrier);
    node.set("inputs", ids(plan.inputs));
    ObjectNode sinks = NODES.objectNode();
    for (EpochPlanner.SinkPlan sink : plan.sinks.values()) {
      ObjectNode s = NODES.objectNode();
      s.put("action", sink.action.protocolName);
      putLong(s, "main_head", sink.mainHead);
      putLong(s, "staged_head", sink.stagedHead);
      s.set("previous_inputs", ids(sink.previousInputs));
      putLong(s, "fence", sink.fence);
      if (sink.action == EpochPlanner.Action.REGENERATE) {
        if (sink.change == null) {
          s.putNull("reason");
        } else {
          s.put("reason", sink.change.reason);
        }
        s.put("replay", sink.replay);
      }
      sinks.set(sink.sink, s);
    }
    node.set("sinks", sinks);
    return node;
  }

  private static ObjectNode ids(Map<String, Long> map) {
    ObjectNode node = NODES.objectNode();
    for (Map.Entry<String, Long> e : (map == null ? Collections.<String, Long>emptyMap() : map).entrySet()) {
      putLong(node, e.getKey(), e.getValue());
    }
    return node;
  }

  private static void putLong(ObjectNode node, String key, Long value) {
    if (value == null) {
      node.putNull(key);
    } else {
      node.put(key, value);
    }
  }

  private static List<String> strings(JsonNode array) {
    List<String> out = new ArrayList<>();
    for (JsonNode item : array) {
      out.add(item.asText());
    }
    return out;
  }

  private static JsonNode parse(String json) {
    try {
      return JSON.readTree(json);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
