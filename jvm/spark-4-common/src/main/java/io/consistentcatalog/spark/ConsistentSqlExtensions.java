package io.consistentcatalog.spark;

import io.consistentcatalog.spark.context.WriteStatements;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.TableIdentifier;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.parser.ParseException;
import org.apache.spark.sql.catalyst.parser.ParserInterface;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import scala.collection.immutable.Seq;
import scala.runtime.AbstractFunction1;
import scala.runtime.AbstractFunction2;
import scala.runtime.BoxedUnit;

/**
 * Spark 4's variant of the shared {@code ConsistentSqlExtensions} (jvm/spark-plugin; excluded from the Spark 4 lines'
 * build): Spark 4 parses {@code CALL <catalog>.system.refresh_cut()} itself and resolves it against the
 * catalog's {@code loadProcedure}, so no CALL parser is needed. What stays is the rest of the shared one: the
 * parser wrapper telling {@link WriteStatements} which statement this thread parsed last, the resolution rule
 * {@link ChangesRule} (a stream's read of changes) and the post-hoc {@link WriteRule}.
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
            return new StatementParser(delegate);
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

  /** The wrapped parser, recording each parsed statement for {@link WriteStatements}. */
  static final class StatementParser implements ParserInterface {
    private final ParserInterface delegate;

    StatementParser(ParserInterface delegate) {
      this.delegate = delegate;
    }

    @Override
    public LogicalPlan parsePlan(String sqlText) throws ParseException {
      LogicalPlan plan = ChangesRule.marked(delegate.parsePlan(sqlText)); // a read of changes' * (§5.10)
      WriteStatements.parsed(plan, sqlText); // the statement's text: its epoch's definition (protocol §6.10)
      return plan;
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
    public StructType parseRoutineParam(String sqlText) throws ParseException {
      return delegate.parseRoutineParam(sqlText);
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
