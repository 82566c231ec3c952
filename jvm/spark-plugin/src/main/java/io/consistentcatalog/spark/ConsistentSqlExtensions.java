package io.consistentcatalog.spark;

import io.consistentcatalog.spark.context.WriteStatements;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.TableIdentifier;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.parser.ParseException;
import org.apache.spark.sql.catalyst.parser.ParserInterface;
import org.apache.spark.sql.catalyst.plans.logical.CallArgument;
import org.apache.spark.sql.catalyst.plans.logical.CallStatement;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.NamedArgument;
import org.apache.spark.sql.catalyst.plans.logical.PositionalArgument;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import scala.collection.JavaConverters;
import scala.collection.Seq;
import scala.runtime.AbstractFunction1;
import scala.runtime.AbstractFunction2;
import scala.runtime.BoxedUnit;

/**
 * Lets {@code CALL <catalog>.system.refresh_cut()}, {@code CALL <catalog>.system.current_cut('ns.t')} and
 * {@code CALL <catalog>.system.reassign(table => 'ns.t', job => 'J')} and {@code CALL <catalog>.system.recent_results()}
 * parse. Iceberg's SQL extensions parse a CALL only when it names one of Iceberg's own procedures, so
 * this parser, listed after them in {@code spark.sql.extensions}, turns these into the same
 * {@code CallStatement} Iceberg's parser builds (resolved by Iceberg against the catalog's
 * {@code loadProcedure}) and hands every other statement to the parser it wraps.
 *
 * <pre>
 * spark.sql.extensions  org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions,io.consistentcatalog.spark.ConsistentSqlExtensions
 * </pre>
 */
public class ConsistentSqlExtensions extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    extensions.injectParser(
        new AbstractFunction2<SparkSession, ParserInterface, ParserInterface>() {
          @Override
          public ParserInterface apply(SparkSession session, ParserInterface delegate) {
            return new CallParser(delegate);
          }
        });
    extensions.injectResolutionRule(
        new AbstractFunction1<SparkSession, org.apache.spark.sql.catalyst.rules.Rule<LogicalPlan>>() {
          @Override
          public org.apache.spark.sql.catalyst.rules.Rule<LogicalPlan> apply(SparkSession session) {
            return new ChangesRule(); // a stream's read of changes: the changes' columns (§5.7)
          }
        });
    extensions.injectPostHocResolutionRule(
        new AbstractFunction1<SparkSession, org.apache.spark.sql.catalyst.rules.Rule<LogicalPlan>>() {
          @Override
          public org.apache.spark.sql.catalyst.rules.Rule<LogicalPlan> apply(SparkSession session) {
            return new WriteRule(session);
          }
        });
    return BoxedUnit.UNIT;
  }

  static final class CallParser implements ParserInterface {
    private static final Pattern CALL =
        Pattern.compile(
            "\\s*call\\s+((?:`[^`]+`|[a-z_][a-z0-9_]*)\\s*\\.\\s*system\\s*\\.\\s*(?:refresh_cut|current_cut|reassign|recent_results|create_changes_view))\\s*\\((.*)\\)\\s*;?\\s*",
            Pattern.CASE_INSENSITIVE | Pattern.DOTALL);
    private static final Pattern NAMED = Pattern.compile("\\s*([a-z_][a-z0-9_]*)\\s*=>\\s*(.*)", Pattern.CASE_INSENSITIVE | Pattern.DOTALL);

    private final ParserInterface delegate;

    CallParser(ParserInterface delegate) {
      this.delegate = delegate;
    }

    @Override
    public LogicalPlan parsePlan(String sqlText) throws ParseException {
      Matcher m = CALL.matcher(sqlText);
      if (!m.matches()) {
        LogicalPlan plan = ChangesRule.marked(delegate.parsePlan(sqlText)); // a read of changes' * (§5.10)
        WriteStatements.parsed(plan, sqlText);
        return plan;
      }
      WriteStatements.parsed(null);
      List<String> name = new ArrayList<>();
      for (String part : m.group(1).split("\\.")) {
        String p = part.trim();
        if (p.startsWith("`") && p.endsWith("`")) {
          p = p.substring(1, p.length() - 1);
        }
        name.add(p.toLowerCase(Locale.ROOT).equals("system") ? "system" : p);
      }
      List<CallArgument> args = new ArrayList<>();
      for (String arg : splitArguments(m.group(2))) {
        Matcher named = NAMED.matcher(arg);
        if (named.matches()) {
          args.add(new NamedArgument(named.group(1), delegate.parseExpression(named.group(2).trim())));
        } else {
          args.add(new PositionalArgument(delegate.parseExpression(arg.trim())));
        }
      }
      return new CallStatement(seq(name), seq(args));
    }

    /** Arguments split at top-level commas (outside quotes and parentheses). */
    static List<String> splitArguments(String text) {
      List<String> found = new ArrayList<>();
      StringBuilder current = new StringBuilder();
      int depth = 0;
      char quote = 0;
      for (int i = 0; i < text.length(); i++) {
        char c = text.charAt(i);
        if (quote != 0) {
          current.append(c);
          if (c == '\\' && i + 1 < text.length()) {
            current.append(text.charAt(++i));
          } else if (c == quote) {
            quote = 0;
          }
          continue;
        }
        if (c == '\'' || c == '"') {
          quote = c;
        } else if (c == '(') {
          depth++;
        } else if (c == ')') {
          depth--;
        } else if (c == ',' && depth == 0) {
          found.add(current.toString());
          current.setLength(0);
          continue;
        }
        current.append(c);
      }
      if (current.toString().trim().length() > 0) {
        found.add(current.toString());
      }
      return found;
    }

    private static <T> Seq<T> seq(List<T> items) {
      return JavaConverters.asScalaBufferConverter(items).asScala().toList();
    }

    @Override
    public Expression parseExpression(String sqlText) throws ParseException {
      return delegate.parseExpression(sqlText);
    }

    @Override
    public TableIdentifier parseTableIdentifier(String sqlText) throws ParseException {
      return delegate.parseTableIdentifier(sqlText);
    }

    @Override
    public FunctionIdentifier parseFunctionIdentifier(String sqlText) throws ParseException {
      return delegate.parseFunctionIdentifier(sqlText);
    }

    @Override
    public Seq<String> parseMultipartIdentifier(String sqlText) throws ParseException {
      return delegate.parseMultipartIdentifier(sqlText);
    }

    @Override
    public LogicalPlan parseQuery(String sqlText) throws ParseException {
      return ChangesRule.marked(delegate.parseQuery(sqlText));
    }

    @Override
    public StructType parseTableSchema(String sqlText) throws ParseException {
      return delegate.parseTableSchema(sqlText);
    }

    @Override
    public DataType parseDataType(String sqlText) throws ParseException {
      return delegate.parseDataType(sqlText);
    }
  }
}
